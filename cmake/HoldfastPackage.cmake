# Packaging: the version properties of the libraries, one install export and one pkg-config
# file per component, and the CMake package that loads them (docs/adr/0010).
#
#   holdfast_library(<target> <component>)  in the library's own CMakeLists.txt
#   holdfast_install_package()              once, at the end of the top-level CMakeLists.txt
#
# Components: core (Threads), sqlite (SQLite3), pg (libpq), sim (core only), policy (core
# only: nlohmann-json is header-only and private to its build, docs/adr/0012).
include_guard(GLOBAL)

# The dependency of each component that a consumer must find for it: the CMake package
# (find_dependency in holdfastConfig.cmake), the pkg-config module (Requires.private), and
# the link flags used when pkg-config does not know the module.
set(HOLDFAST_DEP_CMAKE_sqlite SQLite3)
set(HOLDFAST_DEP_PC_sqlite sqlite3)
set(HOLDFAST_DEP_LIBS_sqlite -lsqlite3)
set(HOLDFAST_DEP_CMAKE_pg PostgreSQL)
set(HOLDFAST_DEP_PC_pg libpq)
set(HOLDFAST_DEP_LIBS_pg -lpq)

set(HOLDFAST_DESCRIPTION_core "holdfast core: retry policies, breaker, throttle, Shield, logger")
set(HOLDFAST_DESCRIPTION_sqlite "holdfast SQLite driver with resilient reads and writes")
set(HOLDFAST_DESCRIPTION_pg "holdfast PostgreSQL driver (libpq), pool and resilient paths")
set(HOLDFAST_DESCRIPTION_sim "holdfast retry-storm simulator")
set(HOLDFAST_DESCRIPTION_policy "holdfast policy files: Shield options from JSON")

# What every holdfast library has: the alias holdfast::<component>, position-independent
# code, the public include directory, the project's warnings, VERSION/SOVERSION, and with
# HOLDFAST_INSTALL its install rule in the export set of its component.
function(holdfast_library target component)
  add_library(holdfast::${component} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${component}
                                             POSITION_INDEPENDENT_CODE ON
                                             VERSION ${holdfast_VERSION}
                                             SOVERSION ${holdfast_VERSION_MAJOR})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:holdfast_warnings>)
  if(HOLDFAST_INSTALL)
    install(TARGETS ${target} EXPORT holdfast-${component}-targets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
            LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    set_property(GLOBAL APPEND PROPERTY HOLDFAST_COMPONENT_TARGETS "${component}=${target}")
  endif()
endfunction()

# The link flags of a dependency's library as pkg-config reports them (its shared library),
# or the fallback when pkg-config does not know it.
function(_holdfast_dep_libs component out)
  set(libs ${HOLDFAST_DEP_LIBS_${component}})
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --libs ${HOLDFAST_DEP_PC_${component}}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND flags)
      set(libs ${flags})
    endif()
  endif()
  set(${out} "${libs}" PARENT_SCOPE)
endfunction()

function(holdfast_install_package)
  get_property(entries GLOBAL PROPERTY HOLDFAST_COMPONENT_TARGETS)
  set(components "")
  foreach(entry IN LISTS entries)
    string(REPLACE "=" ";" pair "${entry}")
    list(GET pair 0 component)
    list(GET pair 1 target)
    list(APPEND components ${component})
    set(target_${component} ${target})
  endforeach()
  if(NOT "core" IN_LIST components)
    message(FATAL_ERROR "holdfast_install_package: holdfast_core is not installed")
  endif()

  set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/holdfast)
  set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/holdfast
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

  # CMake: one targets file per component, loaded by holdfastConfig.cmake on request.
  foreach(component IN LISTS components)
    install(EXPORT holdfast-${component}-targets NAMESPACE holdfast::
            FILE holdfast-${component}-targets.cmake DESTINATION ${cmake_dir})
  endforeach()
  set(HOLDFAST_PACKAGE_COMPONENTS "${components}")
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/holdfastConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/holdfastConfig.cmake
                                INSTALL_DESTINATION ${cmake_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/holdfastConfigVersion.cmake
                                   VERSION ${holdfast_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/holdfastConfig.cmake
                ${PROJECT_BINARY_DIR}/holdfastConfigVersion.cmake
          DESTINATION ${cmake_dir})

  # pkg-config: holdfast-<component>.pc each, and holdfast.pc requiring all of them. The
  # files find the prefix from their own place (${pcfiledir}), so the install relocates.
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(HF_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(HF_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  else()
    file(RELATIVE_PATH up /holdfast-root/${pc_dir} /holdfast-root)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(HF_PC_PREFIX "\${pcfiledir}/${up}")
    set(HF_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(HF_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
  else()
    set(HF_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  set(HF_PC_VERSION ${holdfast_VERSION})
  set(all_modules "")
  foreach(component IN LISTS components)
    set(target ${target_${component}})
    get_target_property(name ${target} OUTPUT_NAME)
    if(NOT name)
      set(name ${target})
    endif()
    get_target_property(type ${target} TYPE)
    set(HF_PC_NAME holdfast-${component})
    set(HF_PC_DESCRIPTION "${HOLDFAST_DESCRIPTION_${component}}")
    set(HF_PC_REQUIRES "holdfast-core")
    set(HF_PC_REQUIRES_PRIVATE "${HOLDFAST_DEP_PC_${component}}")
    set(HF_PC_LIBS "-L\${libdir} -l${name}")
    if(component STREQUAL "core")
      set(HF_PC_REQUIRES "")
      string(APPEND HF_PC_LIBS " -pthread")
    elseif(HOLDFAST_DEP_PC_${component} AND type STREQUAL "STATIC_LIBRARY")
      # An archive cannot carry its own dependencies: the consumer links them, from Libs so
      # that a plain `pkg-config --libs` works (docs/adr/0010).
      _holdfast_dep_libs(${component} dep_libs)
      string(APPEND HF_PC_LIBS " ${dep_libs}")
    endif()
    set(HF_PC_REQUIRES_LINES "")
    if(HF_PC_REQUIRES)
      string(APPEND HF_PC_REQUIRES_LINES "Requires: ${HF_PC_REQUIRES}\n")
    endif()
    if(HF_PC_REQUIRES_PRIVATE)
      string(APPEND HF_PC_REQUIRES_LINES "Requires.private: ${HF_PC_REQUIRES_PRIVATE}\n")
    endif()
    configure_file(${PROJECT_SOURCE_DIR}/cmake/holdfast-component.pc.in
                   ${PROJECT_BINARY_DIR}/holdfast-${component}.pc @ONLY)
    install(FILES ${PROJECT_BINARY_DIR}/holdfast-${component}.pc DESTINATION ${pc_dir})
    list(APPEND all_modules holdfast-${component})
  endforeach()
  list(JOIN all_modules " " HF_PC_REQUIRES)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/holdfast.pc.in ${PROJECT_BINARY_DIR}/holdfast.pc
                 @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/holdfast.pc DESTINATION ${pc_dir})
endfunction()
