# Fuzz targets (libFuzzer), built only in a tree configured with clang and -DFABFLOW_FUZZ=ON
# (scripts/fuzz.sh makes one in build-fuzz/). Each target in fuzz/ feeds one parser of data
# from a peer or a file; they run under ASan and UBSan. Only the sources those parsers live in
# are compiled here (instrumented for coverage), not the whole library.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "FABFLOW_FUZZ needs clang (libFuzzer): CXX=clang++ cmake ... "
                      "(scripts/fuzz.sh does it)")
endif()

# One target per fuzz/NAME.cc (scripts/fuzz.sh lists them the same way).
file(GLOB FABFLOW_FUZZ_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/fuzz/*.cc)
set(FABFLOW_FUZZ_TARGETS)
foreach(f ${FABFLOW_FUZZ_SOURCES})
  get_filename_component(name ${f} NAME_WE)
  list(APPEND FABFLOW_FUZZ_TARGETS ${name})
endforeach()
set(FABFLOW_FUZZ_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=undefined)

add_library(fabflow_fuzz_parsers STATIC
  src/bootstrap/env.cc
  src/bootstrap/net.cc
  src/bootstrap/job_store.cc
  src/bootstrap/pmi2.cc
  src/bootstrap/pmix.cc
  src/bootstrap/wire.cc
  src/bench/environment.cc
  src/bench/experiment.cc
  src/bench/experiment_model.cc
  src/bench/report.cc
  src/bench/stats.cc
  src/bulk/descriptor.cc
  src/common/advice.cc
  src/common/affinity.cc
  src/common/bounded_wait.cc
  src/common/idle_poll.cc
  src/common/machine.cc
  src/common/shm_regions.cc
  src/flow/auto.cc
  src/flow/checksum.cc
  src/flow/design.cc
  src/kv/item.cc
  src/seq/hello.cc
  src/kv/workload.cc
  src/model/pcie.cc
  src/transport/libfabric/fabric_transport.cc
  src/transport/libfabric/shm_lock_watch.cc
  src/transport/libfabric/loader.cc
  src/transport/libfabric/select.cc
  src/transport/local/local_setup.cc
  src/transport/local/local_transport.cc
  src/transport/local/cross_memory.cc
  src/transport/names.cc
  src/transport/profile/profile.cc)
target_include_directories(fabflow_fuzz_parsers PUBLIC include ${PROJECT_BINARY_DIR}/include src
  ${LIBFABRIC_INCLUDE_DIRS})
target_compile_options(fabflow_fuzz_parsers PUBLIC ${FABFLOW_FUZZ_SANITIZE} -g -O1
  PRIVATE -fsanitize=fuzzer-no-link)
target_compile_definitions(fabflow_fuzz_parsers PRIVATE ${FABFLOW_BUILD_DEFINITIONS})
target_include_directories(fabflow_fuzz_parsers PRIVATE ${PROJECT_BINARY_DIR}/generated)
add_dependencies(fabflow_fuzz_parsers fabflow_revision)
target_link_libraries(fabflow_fuzz_parsers PUBLIC Threads::Threads nlohmann_json::nlohmann_json
  ${FABFLOW_PRIVATE_LIBS})

foreach(t ${FABFLOW_FUZZ_TARGETS})
  add_executable(fuzz_${t} fuzz/${t}.cc)
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${FABFLOW_FUZZ_SANITIZE})
  target_link_libraries(fuzz_${t} PRIVATE fabflow_fuzz_parsers)
  list(APPEND FABFLOW_FUZZ_EXECUTABLES fuzz_${t})
endforeach()
add_custom_target(fuzz_targets DEPENDS ${FABFLOW_FUZZ_EXECUTABLES})
