# What `cmake --install` places, the CMake package and pkg-config file that find it, and the
# Debian package CPack builds from the same install (docs/install.md).
include(CMakePackageConfigHelpers)

set(FABFLOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fabflow)
set(FABFLOW_SHARE_DIR ${CMAKE_INSTALL_DATADIR}/fabflow)

# Library, headers, CLI.
install(TARGETS fabflow fabflow_shared EXPORT fabflowTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/fabflow ${PROJECT_BINARY_DIR}/include/fabflow
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS fabflow_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Everything the install takes from the build: scripts/setup.sh builds this, so the tree it
# leaves installs and packs (scripts/check_install.sh builds nothing more before it installs).
add_custom_target(fabflow_installable DEPENDS fabflow fabflow_shared fabflow_cli)

# The benchmark engine's data and plotting: `fabflow experiment` finds them in
# <prefix>/share/fabflow next to <prefix>/bin/fabflow.
install(DIRECTORY experiments DESTINATION ${FABFLOW_SHARE_DIR})
install(DIRECTORY python/fabflow_plot DESTINATION ${FABFLOW_SHARE_DIR}/python
  PATTERN __pycache__ EXCLUDE)

# Docs and the man page.
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES README.md CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The examples' sources and their CMake project: `cmake -S <docdir>/examples` builds them.
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
configure_file(man/fabflow.1.in ${PROJECT_BINARY_DIR}/man/fabflow.1 @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/man/fabflow.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# find_package(fabflow 0.2): fabflow::fabflow (shared) and fabflow::fabflow_static.
install(EXPORT fabflowTargets NAMESPACE fabflow:: DESTINATION ${FABFLOW_CMAKE_DIR})
configure_package_config_file(cmake/fabflowConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fabflowConfig.cmake INSTALL_DESTINATION ${FABFLOW_CMAKE_DIR})
# 0.x: only the same minor version is compatible (semantic versioning before 1.0).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fabflowConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fabflowConfig.cmake
  ${PROJECT_BINARY_DIR}/fabflowConfigVersion.cmake DESTINATION ${FABFLOW_CMAKE_DIR})

# pkg-config --cflags --libs fabflow (the shared library) or fabflow-static (libfabflow.a,
# with libfabric and libcrypto still linked shared).
# Relocatable: the prefix is found from the .pc file's own folder, so --prefix at install time
# (or CPack's /usr) needs no reconfigure.
file(RELATIVE_PATH FABFLOW_PC_TO_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" FABFLOW_PC_TO_PREFIX "${FABFLOW_PC_TO_PREFIX}")
foreach(pc fabflow fabflow-static)
  configure_file(cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# The Debian package: `cpack -G DEB` in the build tree (after building everything) writes
# fabflow_<version>_amd64.deb. Run-time dependencies come from dpkg-shlibdeps (libssl3,
# libstdc++6, libc6), and libfabric1, which fabflow opens at run time, is declared here;
# building against it also needs the -dev packages suggested.
set(CPACK_PACKAGE_NAME fabflow)
set(CPACK_PACKAGE_VENDOR "fabflow developers")
set(CPACK_PACKAGE_CONTACT "fabflow developers <fabflow@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "fast communication over RDMA fabrics, and the benchmarks to choose it")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libfabric1 (>= 1.17)")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, python3-matplotlib, memcached")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libfabric-dev, nlohmann-json3-dev, libssl-dev, libxxhash-dev, libpmix-dev, libpmi2-0-dev, pkg-config")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "fast communication over RDMA fabrics, and the benchmarks to choose it
Flow queues, request-response channels and the benchmark engine that picks a design, on any
libfabric provider or native shared memory. The package holds the library (shared and
static), its headers, CMake package and pkg-config files, the fabflow command-line tool with
its experiment catalogue and plotting module, the docs and the man page.")
set(CPACK_STRIP_FILES ON)
include(CPack)
