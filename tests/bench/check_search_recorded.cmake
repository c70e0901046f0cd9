# The strategies replayed on a search recorded on the device (bench_tuner search --json-out on an
# H100, seventeenth session: 400 random evaluations on each of 8 bf16 shapes of gemm.json, every
# one timed after an L2 flush), with no device. The search target is the issue's: within 2% of
# the long search's best in at most 10% of its evaluations. The counts are those the recording's
# own run printed or better; a change to the model or a strategy that loses a shape fails here
# before it costs device time to find out (a model that stopped counting a small grid's idle SMs
# twice took the model to 6 of 8 and evolve to 5). surrogate, added after the recording, met it on
# all 8 at its first run, with constants set before it was replayed.
# Run as: cmake -DBENCH=<bench_tuner> -DRECORDING=<.tar.xz> -DWORK=<scratch folder> -P check_search_recorded.cmake
foreach(var BENCH RECORDING WORK)
  if(NOT ${var})
    message(FATAL_ERROR "check_search_recorded: pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf "${RECORDING}" WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE status)
file(GLOB recorded "${WORK}/*.json")
if(NOT status EQUAL 0 OR NOT recorded)
  message(FATAL_ERROR "check_search_recorded: could not unpack ${RECORDING} (${status})")
endif()
set(ENV{GMJIT_CACHE} "${WORK}/search.db")
execute_process(COMMAND "${BENCH}" search --replay ${recorded} OUTPUT_VARIABLE log ERROR_VARIABLE log
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "check_search_recorded: the replay failed (${status}):\n${log}")
endif()
# strategy -> the fewest shapes of 8 it must bring within 2% in 10% of the evaluations
foreach(pair "model;7" "climb;7" "evolve;7" "surrogate;8")
  list(GET pair 0 strategy)
  list(GET pair 1 wanted)
  if(NOT log MATCHES "\n  ${strategy}: ([0-9]+) of 8")
    message(FATAL_ERROR "check_search_recorded: no summary line for ${strategy}:\n${log}")
  endif()
  set(met ${CMAKE_MATCH_1})
  if(met LESS wanted)
    string(REGEX REPLACE "\ncurve,[^\n]*" "" table "${log}")
    message(FATAL_ERROR "check_search_recorded: ${strategy} met the target on ${met} of 8 recorded shapes, "
                        "fewer than ${wanted}:\n${table}")
  endif()
  message(STATUS "${strategy}: ${met} of 8 recorded shapes (at least ${wanted})")
endforeach()
