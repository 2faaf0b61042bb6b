# asio comes from Debian (libasio-dev): this port installs nothing (tests/packaging/CMakeLists.txt).
set(VCPKG_POLICY_EMPTY_PACKAGE enabled)
