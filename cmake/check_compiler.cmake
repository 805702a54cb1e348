# mg_check_wide_constants(<out_var> <flags>...): compiles tests/compiler/wide_constants.cpp with
# CMAKE_CXX_FLAGS, the build type's flags and <flags>, runs it, and sets <out_var> to the flags to
# build with. GCC 12 miscompiles wide integer constants wherever it may move 32 bytes as one integer
# (every AVX-512 -march; issue 37). Where the probe fails, and passes again with -mmove-max=128
# -mstore-max=128, <out_var> is <flags> and those; where nothing makes it pass, configuring stops.
# Where it cannot run here (flags for a CPU this machine is not, or cross-compiling), the workaround
# is added when the compiler takes it.
function(mg_check_wide_constants out_var)
  set(flags ${ARGN})
  set(workaround -mmove-max=128 -mstore-max=128)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-mmove-max=128 MG_HAS_MOVE_MAX)  # GCC 12 brought -mmove-max and -mstore-max
  set(CMAKE_TRY_COMPILE_CONFIGURATION ${CMAKE_BUILD_TYPE})
  string(MD5 key "${CMAKE_CXX_COMPILER};${CMAKE_CXX_FLAGS};${CMAKE_BUILD_TYPE};${flags}")
  string(JOIN " " shown ${flags})
  set(what "Wide constants: ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} with '${shown}'")
  foreach(attempt plain workaround)
    set(try_flags ${flags})
    if(attempt STREQUAL "workaround")
      if(NOT MG_HAS_MOVE_MAX)
        break()
      endif()
      list(APPEND try_flags ${workaround})
    endif()
    try_run(MG_PROBE_RUN_${attempt}_${key} MG_PROBE_BUILT_${attempt}_${key} ${CMAKE_BINARY_DIR}/probes
      ${CMAKE_SOURCE_DIR}/tests/compiler/wide_constants.cpp
      CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${MG_INCLUDE_DIR}" COMPILE_DEFINITIONS ${try_flags}
      CXX_STANDARD 17 COMPILE_OUTPUT_VARIABLE built_output RUN_OUTPUT_VARIABLE run_output)
    if(NOT MG_PROBE_BUILT_${attempt}_${key})
      message(FATAL_ERROR "tests/compiler/wide_constants.cpp does not compile with ${what}:\n${built_output}")
    endif()
    set(rc ${MG_PROBE_RUN_${attempt}_${key}})
    if(rc STREQUAL "1")
      string(STRIP "${run_output}" run_output)
      message(STATUS "${what}: ${run_output}")
      continue()
    endif()
    if(rc STREQUAL "0" AND attempt STREQUAL "plain")
      message(STATUS "${what}: right")
    elseif(rc STREQUAL "0")
      message(STATUS "${what}: miscompiles them (issue 37); with -mmove-max=128 -mstore-max=128 the probe passes")
    elseif(MG_HAS_MOVE_MAX)  # did not run here: the workaround on trust
      message(STATUS "${what}: the probe cannot run here (${rc}); adding -mmove-max=128 -mstore-max=128")
      list(APPEND try_flags ${workaround})
    else()
      message(STATUS "${what}: the probe cannot run here (${rc})")
    endif()
    set(${out_var} ${try_flags} PARENT_SCOPE)
    return()
  endforeach()
  message(FATAL_ERROR "${what} miscompiles wide integer constants (tests/compiler/wide_constants.cpp, issue 37), "
    "and -mmove-max=128 -mstore-max=128 do not help. Configure with -DMG_NATIVE=OFF, other CMAKE_CXX_FLAGS, or "
    "another compiler.")
endfunction()
