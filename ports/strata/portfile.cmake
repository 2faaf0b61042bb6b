# strata's vcpkg port. It lives in strata's own tree (an overlay port: vcpkg install
# --overlay-ports=<strata>/ports, or "overlay-ports" in vcpkg-configuration.json), so the source
# is the tree around it; a registry's copy would take it from a release with vcpkg_from_github.
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")

vcpkg_check_features(
  OUT_FEATURE_OPTIONS feature_options
  FEATURES
    cuda STRATA_ENABLE_CUDA
    nccl STRATA_ENABLE_NCCL
    tools STRATA_BUILD_TOOLS)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DSTRATA_BUILD_TESTS=OFF
    -DSTRATA_BUILD_BENCHMARKS=OFF
    -DSTRATA_BUILD_EXAMPLES=OFF
    -DSTRATA_INSTALL=ON
    -DSTRATA_WARNINGS_AS_ERRORS=OFF
    ${feature_options})
vcpkg_cmake_install()

# strata installs its CMake package in share/cmake/strata; vcpkg wants it in share/strata.
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/strata)
vcpkg_fixup_pkgconfig()
if("tools" IN_LIST FEATURES)
  vcpkg_copy_tools(TOOL_NAMES strata-launch strata-ps strata-perf AUTO_CLEAN)
endif()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share"
     "${CURRENT_PACKAGES_DIR}/share/doc")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
