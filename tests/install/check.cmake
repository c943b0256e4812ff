# Installs the build into a fresh prefix, then builds consumers of it outside the tree and
# runs them:
#   - CMake: find_package(holdfast CONFIG REQUIRED COMPONENTS ...) with all components, with
#     sqlite only (PostgreSQL made unfindable), with core only (SQLite3 and PostgreSQL made
#     unfindable), and without COMPONENTS; an unknown component, and pg without PostgreSQL,
#     must fail to configure;
#   - pkg-config: holdfast-core, holdfast-sqlite, holdfast-pg and holdfast, compiled with
#     `pkg-config --cflags --libs`, with no language-standard flag in the Cflags and
#     sqlite3 / libpq in Requires.private; holdfast-policy without nlohmann-json.
# Variables: BUILD_DIR, SOURCE_DIR (tests/install), WORK_DIR, LINK_FLAGS, GENERATOR.
# The consumers are compiled plainly (what a user's build does) and linked with LINK_FLAGS:
# the sanitizers' runtimes when the installed libraries were built with them.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(GLOB_RECURSE config LIST_DIRECTORIES false ${prefix}/*/holdfastConfig.cmake)
if(NOT config)
  message(FATAL_ERROR "no holdfastConfig.cmake under ${prefix}")
endif()
get_filename_component(cmake_dir "${config}" DIRECTORY)
get_filename_component(libdir "${cmake_dir}/../.." ABSOLUTE)
set(pc_dir ${libdir}/pkgconfig)
set(have_pg FALSE)
if(EXISTS ${cmake_dir}/holdfast-pg-targets.cmake)
  set(have_pg TRUE)
endif()
foreach(component core sqlite sim policy)
  if(NOT EXISTS ${cmake_dir}/holdfast-${component}-targets.cmake)
    message(FATAL_ERROR "the ${component} component is not installed in ${cmake_dir}")
  endif()
endforeach()

# Shared libraries carry VERSION and SOVERSION (a static build has only the archives).
file(GLOB shared ${libdir}/libholdfast_core.so*)
if(shared AND NOT EXISTS ${libdir}/libholdfast_core.so.0)
  message(FATAL_ERROR "libholdfast_core.so has no SOVERSION link: ${shared}")
endif()

# --- CMake --------------------------------------------------------------------------------
# consumer(<name> [EXPECT_FAILURE <regex>] [ARGS <cmake args>...])
function(consumer name)
  cmake_parse_arguments(arg "" "EXPECT_FAILURE" "ARGS" ${ARGN})
  set(dir ${WORK_DIR}/consumer-${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${dir} -G ${GENERATOR}
                          -DCMAKE_PREFIX_PATH=${prefix} "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}" ${arg_ARGS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(arg_EXPECT_FAILURE)
    if(rc EQUAL 0)
      message(FATAL_ERROR "consumer ${name}: configured, but should have failed\n${out}")
    endif()
    if(NOT "${out}${err}" MATCHES "${arg_EXPECT_FAILURE}")
      message(FATAL_ERROR "consumer ${name}: failed without saying '${arg_EXPECT_FAILURE}'\n"
                          "${out}\n${err}")
    endif()
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer ${name}: configure failed (${rc})\n${out}\n${err}")
  endif()
  run(${CMAKE_COMMAND} --build ${dir})
  run(${dir}/consumer)
endfunction()

set(all sqlite sim policy)
if(have_pg)
  set(all sqlite pg sim policy)
endif()
list(JOIN all " " all_arg)
# With every component, also the library guide's Boost.Beast service on the PostgreSQL
# adapter (examples/asio_pg_example.cpp), built against the installed headers only.
consumer(all ARGS "-DHOLDFAST_COMPONENTS=${all_arg}"
         "-DHOLDFAST_ASIO_PG_EXAMPLE=${SOURCE_DIR}/../../examples/asio_pg_example.cpp")
consumer(sqlite ARGS -DHOLDFAST_COMPONENTS=sqlite -DCMAKE_DISABLE_FIND_PACKAGE_PostgreSQL=ON)
consumer(core ARGS -DHOLDFAST_COMPONENTS=core -DCMAKE_DISABLE_FIND_PACKAGE_PostgreSQL=ON
                   -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=ON)
consumer(default)
consumer(unknown EXPECT_FAILURE "has no component nosuch" ARGS -DHOLDFAST_COMPONENTS=nosuch)
if(have_pg)
  consumer(pg-without-libpq EXPECT_FAILURE "PostgreSQL"
           ARGS -DHOLDFAST_COMPONENTS=pg -DCMAKE_DISABLE_FIND_PACKAGE_PostgreSQL=ON)
else()
  consumer(pg-not-built EXPECT_FAILURE "built without its pg component"
           ARGS -DHOLDFAST_COMPONENTS=pg)
endif()

# --- pkg-config ---------------------------------------------------------------------------
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
# A shared build: the programs built with pkg-config's flags have no rpath to the prefix.
set(ENV{LD_LIBRARY_PATH} ${libdir})
function(pkg_config out)
  execute_process(COMMAND pkg-config ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text
                  ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} failed:\n${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

pkg_config(requires --print-requires-private holdfast-sqlite)
if(NOT requires MATCHES "sqlite3")
  message(FATAL_ERROR "holdfast-sqlite.pc: sqlite3 is not in Requires.private: ${requires}")
endif()
if(have_pg)
  pkg_config(requires --print-requires-private holdfast-pg)
  if(NOT requires MATCHES "libpq")
    message(FATAL_ERROR "holdfast-pg.pc: libpq is not in Requires.private: ${requires}")
  endif()
endif()

# holdfast-policy uses nlohmann-json inside its build only (docs/adr/0012).
pkg_config(requires --print-requires-private holdfast-policy)
file(READ ${cmake_dir}/holdfast-policy-targets.cmake policy_targets)
if(requires MATCHES "nlohmann" OR policy_targets MATCHES "nlohmann")
  message(FATAL_ERROR "the installed holdfast::policy depends on nlohmann-json")
endif()

separate_arguments(link_flags UNIX_COMMAND "${LINK_FLAGS}")
# pkg_consumer(<modules> <CONSUMER_USES_ definitions>...)
function(pkg_consumer modules)
  pkg_config(cflags --cflags ${modules})
  if(cflags MATCHES "-std=")
    message(FATAL_ERROR "pkg-config --cflags ${modules} sets the language standard: ${cflags}")
  endif()
  pkg_config(libs --libs ${modules})
  separate_arguments(flags UNIX_COMMAND "${cflags} ${libs}")
  set(defines "")
  foreach(use IN LISTS ARGN)
    list(APPEND defines -DCONSUMER_USES_${use}=1)
  endforeach()
  set(exe ${WORK_DIR}/pkgconfig-${modules})
  run(c++ -std=c++20 ${defines} ${SOURCE_DIR}/consumer.cpp -o ${exe} ${link_flags} ${flags})
  run(${exe})
endfunction()

pkg_consumer(holdfast-core)
pkg_consumer(holdfast-sqlite SQLITE)
pkg_consumer(holdfast-sim SIM)
pkg_consumer(holdfast-policy POLICY)
if(have_pg)
  pkg_consumer(holdfast-pg PG)
  pkg_consumer(holdfast SQLITE PG SIM POLICY)
else()
  pkg_consumer(holdfast SQLITE SIM POLICY)
endif()
message(STATUS "find_package(holdfast COMPONENTS ${all}) and pkg-config both work from ${prefix}")
