# fmt comes from Debian (libfmt-dev): this port installs nothing (tests/packaging/CMakeLists.txt).
set(VCPKG_POLICY_EMPTY_PACKAGE enabled)
