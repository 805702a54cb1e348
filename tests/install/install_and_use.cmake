# cmake -P script run by the install_find_package test (see CMakeLists.txt for the variables).
file(REMOVE_RECURSE ${MG_WORK_DIR})
set(prefix ${MG_WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

run("install" ${CMAKE_COMMAND} --install ${MG_BUILD_DIR} --prefix ${prefix})

# Public headers must stand alone: nothing installed may reach for the private kernels/ headers.
file(GLOB_RECURSE headers ${prefix}/include/memgrad/*.h)
if(NOT headers)
  message(FATAL_ERROR "no headers installed under ${prefix}/include/memgrad")
endif()
foreach(h ${headers})
  file(STRINGS ${h} private_includes REGEX "#include <memgrad/kernels/")
  if(private_includes)
    message(FATAL_ERROR "installed header ${h} includes a private header: ${private_includes}")
  endif()
endforeach()

run("configure" ${CMAKE_COMMAND} -S ${MG_PROJECT_DIR} -B ${MG_WORK_DIR}/build -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${MG_CXX_COMPILER} "-DCMAKE_EXE_LINKER_FLAGS=${MG_LINK_FLAGS}")
run("build" ${CMAKE_COMMAND} --build ${MG_WORK_DIR}/build)
run("run" ${MG_WORK_DIR}/build/hello_memgrad)
