# libnpullm.so and everything `cmake --install` and CPack put in place: the shared library (SONAME
# libnpullm.so.<ABI>), the static library (libnpullm.a, the same objects as npullm_core), the C and
# C++ headers, the npullm tool, a CMake package (find_package(npullm) -> npullm::npullm, and
# npullm::npullm_static), a pkg-config file and the Python module. Included by the top CMakeLists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The ABI number: the C header's NPULLM_ABI_VERSION, checked against this at build time (abi_check.c).
set(NPULLM_SOVERSION 1)

# The shared library is linked from npullm_core's objects (already PIC) as a whole archive, rather
# than compiling every source twice; the version script exports only the public APIs.
add_library(npullm_shared SHARED ${PROJECT_SOURCE_DIR}/src/capi/abi_check.c)
target_compile_definitions(npullm_shared PRIVATE NPULLM_SOVERSION=${NPULLM_SOVERSION})
target_compile_features(npullm_shared PRIVATE c_std_11)
target_link_libraries(npullm_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,npullm_core>")
target_link_options(npullm_shared PRIVATE
  "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/npullm.map" "LINKER:--no-undefined")
set_property(TARGET npullm_shared APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/npullm.map)
target_include_directories(npullm_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(npullm_shared PROPERTIES
  OUTPUT_NAME npullm EXPORT_NAME npullm LINKER_LANGUAGE CXX
  VERSION ${PROJECT_VERSION} SOVERSION ${NPULLM_SOVERSION})

# The C example (examples/c/generate.c): greedy text of a prompt, through the shared library.
add_executable(npullm_c_example ${PROJECT_SOURCE_DIR}/examples/c/generate.c)
target_link_libraries(npullm_c_example PRIVATE npullm_shared)
set_target_properties(npullm_c_example PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR} C_STANDARD 11)

# ---- install ----
install(TARGETS npullm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS npullm_shared EXPORT npullmTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES $<TARGET_FILE:npullm_core> DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libnpullm.a)
install(FILES ${PROJECT_SOURCE_DIR}/include/npullm/npullm.h ${PROJECT_SOURCE_DIR}/include/npullm/llm_pipeline.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/npullm)

set(NPULLM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/npullm)
install(EXPORT npullmTargets NAMESPACE npullm:: DESTINATION ${NPULLM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/npullmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/npullmConfig.cmake INSTALL_DESTINATION ${NPULLM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/npullmConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/npullmConfig.cmake ${PROJECT_BINARY_DIR}/npullmConfigVersion.cmake
  DESTINATION ${NPULLM_CMAKE_DIR})

# pkg-config: relocatable (prefix found from the .pc file's own folder), so the same file serves a
# `cmake --install --prefix` tree and the Debian package.
file(RELATIVE_PATH NPULLM_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${PROJECT_SOURCE_DIR}/cmake/npullm.pc.in ${PROJECT_BINARY_DIR}/npullm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/npullm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Python: a pure-Python package over the C API (ctypes); it finds libnpullm.so from its own place.
set(NPULLM_PYTHON_DIR ${CMAKE_INSTALL_LIBDIR}/python3/dist-packages CACHE STRING "where the npullm Python package is installed")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/npullm DESTINATION ${NPULLM_PYTHON_DIR}
  PATTERN "__pycache__" EXCLUDE)

# ---- Debian package: cpack -G DEB -> npullm_<version>_amd64.deb ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME npullm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "npullm")
set(CPACK_PACKAGE_CONTACT "npullm maintainers <npullm@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference runtime over ahead-of-time compiled static-shape blobs")
set(CPACK_PACKAGE_DESCRIPTION "npullm runs GGUF language models as static-shape ELF blobs on the CPU: the npullm\n tool (run, chat, serve), libnpullm (C and C++ API), its CMake and pkg-config files,\n and the npullm Python module.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# Depends: the Debian packages of the shared libraries the binaries link (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)  # the installed targets (not libnpullm.a, installed as a plain file)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3")
include(CPack)
