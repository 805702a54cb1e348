# The emulated suite (tests/cuda): every __global__ function of kernels/cuda runs on the host through
# emulated_device.h, against the CPU backend, under memcheck, racecheck, initcheck and synccheck. It
# needs CUDA's headers (cuda_fp16.h, ...), not nvcc: without them it is not built.
# The test sources are compiled with access instrumentation whose calls emulated_hooks.cpp answers:
# ThreadSanitizer's (-fsanitize=thread, with no ThreadSanitizer runtime linked), or, where
# AddressSanitizer instruments the build (MG_SANITIZE, MG_FUZZ: it excludes ThreadSanitizer), clang's
# SanitizerCoverage loads and stores. GCC with AddressSanitizer has neither: the accesses go unchecked
# there, and the checks' own tests say so and skip.
#   mg_emulated_suite(<ctest name> <label>)     (the program: test_<ctest name>)
find_package(doctest REQUIRED CONFIG)
find_package(CUDAToolkit QUIET)
set(_mg_emulated_dir ${CMAKE_CURRENT_LIST_DIR})

function(mg_emulated_suite name label)
  if(NOT CUDAToolkit_FOUND)
    message(STATUS "${name}: no CUDA toolkit headers, the emulated kernel tests are not built")
    return()
  endif()
  set(dir ${_mg_emulated_dir})
  set(program test_${name})
  set(asan OFF)
  if(MG_SANITIZE OR MG_FUZZ)
    set(asan ON)
  endif()
  # The emulator itself and the suite's main, uninstrumented.
  add_library(${program}_emulator OBJECT ${dir}/emulated_device.cpp ${dir}/emulated_memory.cpp ${dir}/emulated_hooks.cpp
                                      ${dir}/emulated_main.cpp)
  target_compile_definitions(${program}_emulator PRIVATE MG_CUDA_KERNELS_DIR="${PROJECT_SOURCE_DIR}/kernels/cuda")
  file(GLOB tests CONFIGURE_DEPENDS ${dir}/test_*_emulated.cpp)
  add_executable(${program} ${tests} ${dir}/emulated_harness.cpp $<TARGET_OBJECTS:${program}_emulator>)
  foreach(target ${program} ${program}_emulator)
    target_link_libraries(${target} PRIVATE doctest::doctest memgrad mg_flags)
    target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${dir})
    # The kernels' #pragma unroll means nothing to a host compiler; their 16-bit tiles are read as
    # 32-bit words. No multiply-add is contracted, as in the CPU kernels the results are compared with.
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unknown-pragmas -fno-strict-aliasing -ffp-contract=off)
  endforeach()
  if(NOT asan)
    target_compile_options(${program} PRIVATE -fsanitize=thread
      $<IF:$<CXX_COMPILER_ID:Clang>,SHELL:-mllvm -tsan-instrument-func-entry-exit=0,--param=tsan-instrument-func-entry-exit=0>)
  elseif(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    foreach(target ${program} ${program}_emulator)  # the emulator's fibers tell AddressSanitizer of each switch
      target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=undefined
                                               -fno-omit-frame-pointer)
    endforeach()
    target_compile_options(${program} PRIVATE -fsanitize-coverage=func,trace-loads,trace-stores)
    target_link_options(${program} PRIVATE -fsanitize=address,undefined)
  else()
    target_compile_definitions(${program} PRIVATE EMU_UNCHECKED=1)
  endif()
  add_test(NAME ${name} COMMAND ${program})
  set_tests_properties(${name} PROPERTIES LABELS ${label} ENVIRONMENT "OMP_WAIT_POLICY=passive")
endfunction()
