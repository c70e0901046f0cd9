# Fails when a source file includes a header of a higher layer (docs/ARCHITECTURE.md, Layers).
# Run as: cmake -DROOT=<source dir> -P check_layers.cmake
# A quoted include names a project header by its path from the root ("cache/store.hpp"), by its
# public name ("gmjit/runtime.hpp", under lib/include/) or as a template header ("gmjit/*.cuh",
# under templates/); anything else (a header beside its includer) stays in its own layer.

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

set(layer_core 1)
set(layer_templates 2)
set(layer_codegen 3)
set(layer_cache 4)
set(layer_tuner 5)
set(layer_lib 6)
set(layer_tools 7)
set(layer_bench 7)

# The public headers are declared in lib/include/gmjit/ but implemented on the floor named here;
# a file may include one whose implementation sits on its own floor or below.
set(public_error core)
set(public_types core)
set(public_device core)
set(public_log core)
set(public_tune tuner)
set(public_runtime lib)
set(public_cache lib)
set(public_compile lib)
set(public_kernels lib)
set(public_gmjit lib)

function(layer_of_include include out)
  set(${out} "" PARENT_SCOPE)
  if(include MATCHES "^gmjit/.*\\.cuh$")
    set(${out} templates PARENT_SCOPE)
  elseif(include MATCHES "^gmjit/([a-z_]+)\\.hpp$")
    set(name ${CMAKE_MATCH_1})
    if(NOT DEFINED public_${name})
      message(SEND_ERROR "check_layers: public header gmjit/${name}.hpp has no floor in check_layers.cmake")
      return()
    endif()
    set(${out} ${public_${name}} PARENT_SCOPE)
  elseif(include MATCHES "^([a-z]+)/")
    if(DEFINED layer_${CMAKE_MATCH_1})
      set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
    endif()
  endif()
endfunction()

set(upward "")
set(checked 0)
foreach(folder core templates codegen cache tuner lib tools bench)
  file(GLOB_RECURSE sources "${ROOT}/${folder}/*.cpp" "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.cuh"
       "${ROOT}/${folder}/*.h")
  foreach(source IN LISTS sources)
    file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" include "${line}")
      layer_of_include("${include}" target)
      math(EXPR checked "${checked} + 1")
      if(target AND layer_${target} GREATER layer_${folder})
        file(RELATIVE_PATH where "${ROOT}" "${source}")
        list(APPEND upward "${where} (${folder}, floor ${layer_${folder}}) includes ${include} (${target}, floor ${layer_${target}})")
      endif()
    endforeach()
  endforeach()
endforeach()

if(upward)
  list(JOIN upward "\n  " report)
  message(FATAL_ERROR "check_layers: includes that run upward:\n  ${report}")
endif()
message(STATUS "check_layers: ${checked} includes, none runs upward")
