# nlohmann-json comes from Debian (nlohmann-json3-dev): this port installs nothing (tests/packaging/CMakeLists.txt).
set(VCPKG_POLICY_EMPTY_PACKAGE enabled)
