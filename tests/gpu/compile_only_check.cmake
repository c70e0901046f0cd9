# A compile-only run of the gpu tier (GMJIT_TEST_COMPILE_ONLY): on a machine without a GPU it
# compiles the configurations of the tests that check every one, skips the rest, and a second run
# finds every kernel in the binary cache; it refuses GMJIT_REQUIRE_GPU=1. TESTS is the gpu tier's
# binary, WORK a scratch folder.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(filter "SM90/VectorAdd.*:SM90/Transpose.*:SM90_Device.*")
set(env ${CMAKE_COMMAND} -E env --unset=GMJIT_REQUIRE_GPU GMJIT_TEST_COMPILE_ONLY=sm_90a
    GMJIT_TEST_BINARY_CACHE=${WORK}/binaries.db)

function(run_tier out)
  execute_process(COMMAND ${ARGN} ${TESTS} --gtest_filter=${filter} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  set(${out} "${output}" PARENT_SCOPE)
  set(${out}_code "${code}" PARENT_SCOPE)
endfunction()

run_tier(first ${env})
if(NOT first_code EQUAL 0)
  message(FATAL_ERROR "the compile-only run failed:\n${first}")
endif()
# 6 vector_add cases and 5 transpose ones, each with its configurations and reference.
string(REGEX MATCH "\\[ binaries \\] ([0-9]+) kernels compiled for sm_90a into the run's binary cache \\([^)]*\\), ([0-9]+) already there"
       summary "${first}")
if(NOT summary OR CMAKE_MATCH_1 LESS 50)
  message(FATAL_ERROR "the compile-only run compiled too little or printed no summary:\n${first}")
endif()
set(compiled ${CMAKE_MATCH_1})
math(EXPR listed "${CMAKE_MATCH_1} + ${CMAKE_MATCH_2}")
if(NOT first MATCHES "\\[  SKIPPED \\] SM90_Device.EnumeratesAndFingerprints")
  message(FATAL_ERROR "a test that needs the GPU was not skipped:\n${first}")
endif()
if(NOT first MATCHES "\\[ compiled \\] 48 vector_add fp16 configurations at n=1000003 for sm_90a")
  message(FATAL_ERROR "the vector_add cases did not compile their configurations:\n${first}")
endif()

run_tier(second ${env})
if(NOT second_code EQUAL 0 OR NOT second MATCHES "\\[ binaries \\] 0 kernels compiled for sm_90a [^\n]*, ${listed} already there")
  message(FATAL_ERROR "a second compile-only run did not find all ${compiled} kernels in the cache:\n${second}")
endif()

run_tier(refused ${CMAKE_COMMAND} -E env GMJIT_REQUIRE_GPU=1 GMJIT_TEST_COMPILE_ONLY=sm_90a
         GMJIT_TEST_BINARY_CACHE=${WORK}/binaries.db)
if(refused_code EQUAL 0 OR NOT refused MATCHES "GMJIT_REQUIRE_GPU=1 in a compile-only run")
  message(FATAL_ERROR "GMJIT_REQUIRE_GPU=1 with GMJIT_TEST_COMPILE_ONLY did not fail:\n${refused}")
endif()
