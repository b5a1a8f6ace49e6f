# Tests mirror the source tree: tests/<area>/<name>_test.cc. All of them build into one
# GoogleTest binary; every TEST becomes its own ctest entry. Multi-process tests find the CLI
# through FABFLOW_BIN.
find_package(GTest REQUIRED)
include(GoogleTest)

file(GLOB_RECURSE FABFLOW_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/*_test.cc)
# The tests that run the fabflow CLI as a process (tests/cli/, *_cli_test.cc) need it built; a
# tree that runs only the library's tests (the TSan tree) leaves both out.
option(FABFLOW_CLI_TESTS "Build the tests that run the fabflow CLI (and the CLI for them)" ON)
if(NOT FABFLOW_CLI_TESTS)
  list(FILTER FABFLOW_TEST_SOURCES EXCLUDE REGEX "(/tests/cli/|_cli_test\\.cc$)")
endif()
file(GLOB_RECURSE FABFLOW_TEST_SUPPORT CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/support/*.cc)
add_executable(fabflow_tests ${FABFLOW_TEST_SOURCES} ${FABFLOW_TEST_SUPPORT})
target_include_directories(fabflow_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
  ${LIBFABRIC_INCLUDE_DIRS})
target_link_libraries(fabflow_tests PRIVATE fabflow OpenSSL::Crypto
  GTest::gtest GTest::gtest_main)
target_compile_options(fabflow_tests PRIVATE ${FABFLOW_WARNINGS})
# GoogleTest's header, parsed once per tree instead of once per test file (about a fifth of a
# test file's compile time; every test file includes it).
target_precompile_headers(fabflow_tests PRIVATE <gtest/gtest.h> <string> <thread> <vector>)
# The test files are compiled in unity batches of eight: the headers every one of them parses
# and instantiates (GoogleTest's, fabflow's, nlohmann-json's) then cost once per batch. Under
# ASan eight test files took 60 s one by one and 37 s as one batch. So no two test files may
# define one helper name in the same namespace (anonymous or not): a file that reuses a name
# keeps its helpers in a namespace of its own (tests/bulk/channel_test.cc, for one).
set_target_properties(fabflow_tests PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
# Under a sanitizer the code under test is optimised (the test command builds the library at
# -O1); the test harness itself is built without optimisation and with line tables only: each
# test file then compiles about three times faster. In the release tree the harness is built
# at -O1: it is not shipped, and its checks (payload checksums of every item) still run fast.
if(FABFLOW_SANITIZE)
  target_compile_options(fabflow_tests PRIVATE -O0 -g1)
else()
  target_compile_options(fabflow_tests PRIVATE -O1)
endif()
target_compile_definitions(fabflow_tests PRIVATE FABFLOW_BIN="$<TARGET_FILE:fabflow_cli>"
  FABFLOW_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  ${FABFLOW_BUILD_DEFINITIONS})
if(FABFLOW_CLI_TESTS)
  add_dependencies(fabflow_tests fabflow_cli)
endif()
# NO_PRETTY_VALUES: a CTest name is the GoogleTest name. Every parameterised suite names its
# points itself (point_name, case_name, ...); the "# GetParam() = ..." that CMake appends
# otherwise printed a struct's bytes for most of them, pointers included, so names changed with
# every build.
gtest_discover_tests(fabflow_tests DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES PROPERTIES TIMEOUT 120)

# The stress target, separate from the test command: 10^7 items through every flow design
# point on every transport (hours; narrow it with FILTER, e.g. -DFILTER=*shm_rdm).
# ninja stress    or    scripts/stress.sh [gtest filter] [items]
add_custom_target(stress
  COMMAND ${CMAKE_COMMAND} -E env FABFLOW_FLOW_STRESS=1
          $<TARGET_FILE:fabflow_tests> --gtest_filter=*FlowStress*
  DEPENDS fabflow_tests
  USES_TERMINAL)
