# bench_tuner search keeps every shape's recorded trials in its --json-out, and --replay replays
# the strategies on them with no device exactly as the live run did (asking as far ahead as it
# did): the same tables, seeds and curves. A file without recorded trials is refused by name. The live run uses the simulated
# device, so the trials are the model's own numbers; what is checked is the bookkeeping.
# Run as: cmake -DBENCH=<bench_tuner> -DWORK=<scratch folder> -P check_search_replay.cmake
foreach(var BENCH WORK)
  if(NOT ${var})
    message(FATAL_ERROR "check_search_replay: pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(ENV{GMJIT_CACHE} "${WORK}/search.db")

function(run_bench log)
  execute_process(COMMAND "${BENCH}" search ${ARGN} OUTPUT_FILE "${WORK}/${log}" ERROR_FILE "${WORK}/${log}"
                  RESULT_VARIABLE status)
  set(status ${status} PARENT_SCOPE)
endfunction()

run_bench(live.log --simulated --shape 256x512x512x1 --shape 64x1024x256x1 --long-strategy random
          --max-evaluations 24 --seeds 2 --ahead 8 --json-out "${WORK}/live.json")
if(NOT status EQUAL 0)
  file(READ "${WORK}/live.log" log)
  message(FATAL_ERROR "check_search_replay: the live search failed (${status}):\n${log}")
endif()
run_bench(replay.log --replay "${WORK}/live.json" --seeds 2 --json-out "${WORK}/replay.json")
if(NOT status EQUAL 0)
  file(READ "${WORK}/replay.log" log)
  message(FATAL_ERROR "check_search_replay: the replay failed (${status}):\n${log}")
endif()

file(READ "${WORK}/live.json" live)
file(READ "${WORK}/replay.json" replay)
string(JSON shapes LENGTH "${live}" rows)
if(NOT shapes EQUAL 2)
  message(FATAL_ERROR "check_search_replay: the live run has ${shapes} rows, not 2")
endif()
math(EXPR last "${shapes} - 1")
foreach(i RANGE ${last})
  string(JSON trials LENGTH "${live}" rows ${i} recording trials)
  string(JSON evaluations GET "${live}" rows ${i} long_evaluations)
  if(NOT trials EQUAL evaluations OR trials LESS 2)
    message(FATAL_ERROR "check_search_replay: row ${i} recorded ${trials} trials of ${evaluations} evaluations")
  endif()
  foreach(member recording strategies long_best_ms long_curve valid_candidates)
    string(JSON a GET "${live}" rows ${i} ${member})
    string(JSON b GET "${replay}" rows ${i} ${member})
    string(JSON same EQUAL "${a}" "${b}")
    if(NOT same)
      message(FATAL_ERROR "check_search_replay: row ${i}'s ${member} differs in the replay:\n${a}\n---\n${b}")
    endif()
  endforeach()
endforeach()

# An earlier summary without recorded trials: a usage error that names the shape.
string(JSON stripped REMOVE "${live}" rows 0 recording)
file(WRITE "${WORK}/stripped.json" "${stripped}")
run_bench(stripped.log --replay "${WORK}/stripped.json")
file(READ "${WORK}/stripped.log" log)
if(NOT status EQUAL 2 OR NOT log MATCHES "256x512x512x1 has no recorded trials")
  message(FATAL_ERROR "check_search_replay: a summary without trials gave status ${status}:\n${log}")
endif()
