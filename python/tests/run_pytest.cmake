# Installs the Python package as `pip install ./python` would (into a private directory, from the
# build's libgmjit), checks that the import comes from there, and runs its pytest suite on it.
# Run as: cmake -DPYTHON=<python with pytest, pip, setuptools, wheel> -DSOURCE=<checkout>
#   -DBUILD=<build dir> -DWORK=<scratch dir> -DMARK=<pytest -m expression> [-DNVRTC=1] -P run_pytest.cmake
foreach(var PYTHON SOURCE BUILD WORK MARK)
  if(NOT ${var})
    message(FATAL_ERROR "run_pytest: pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(site "${WORK}/site")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env GMJIT_BUILD_DIR=${BUILD}
    "${PYTHON}" -m pip install --quiet --no-build-isolation --no-deps --no-index --target "${site}" "${SOURCE}/python"
  WORKING_DIRECTORY "${WORK}"
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "run_pytest: pip install ./python failed (${status})")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${site} "${PYTHON}" -c "import gmjit, gmjit._native as n; print(gmjit.__file__); print(n.native_dir())"
  WORKING_DIRECTORY "${WORK}" OUTPUT_VARIABLE where RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR NOT where MATCHES "^${site}/gmjit/__init__.py\n${site}/gmjit/_native\n$")
  message(FATAL_ERROR "run_pytest: gmjit did not import from the installed package (${status}): ${where}")
endif()
set(environment PYTHONPATH=${site})
if(NVRTC)
  list(APPEND environment GMJIT_TEST_NVRTC=1)
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${environment}
    "${PYTHON}" -m pytest -p no:cacheprovider -q -rs -m "${MARK}" "${SOURCE}/python/tests"
  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "run_pytest: pytest -m '${MARK}' failed (${status})")
endif()
