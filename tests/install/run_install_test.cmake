# Run by CTest (see CMakeLists.txt): install, configure + build the consumers, run them; then
# the projects koptConfig.cmake must refuse, each with its message.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

# `project` configured in build directory `build` with `prefixes` (and any further
# arguments) must fail, its output matching `expected`.
function(expect_refused project build prefixes expected)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/${project}
                          -B ${CONSUMER_BUILD}/${build} -G ${GENERATOR} ${toolchain}
                          -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_PREFIX_PATH=${prefixes}"
                          ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REGEX REPLACE "[ \n]+" " " flat "${out}")  # CMake wraps long messages
  if(rc EQUAL 0 OR NOT flat MATCHES "${expected}")
    message(FATAL_ERROR "${build}: expected a refusal matching '${expected}', got (${rc}):\n${out}")
  endif()
  message(STATUS "${build}: refused as expected")
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
set(prefixes "${PREFIX};${DEPS_PREFIX_PATH}")
string(REPLACE ";" "\\;" escaped "${prefixes}")
# A toolchain file carries what the compiler alone does not (bootstrap-deps.sh --with-cuda's
# Clang flags, docs/cuda-builds.md).
set(toolchain "")
if(TOOLCHAIN_FILE)
  set(toolchain "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE}")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -G ${GENERATOR} ${toolchain}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_PREFIX_PATH=${escaped}")
run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run(${CONSUMER_BUILD}/kopt_consumer)

# From C: tests/c/test_c_api.c built by a C project against the installed package.
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/c_consumer -B ${CONSUMER_BUILD}/c -G ${GENERATOR}
    ${toolchain} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_PREFIX_PATH=${escaped}"
    -DC_SOURCE=${C_SOURCE})
run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD}/c)
run(${CONSUMER_BUILD}/c/kopt_c_consumer)

# From Fortran: examples/fortran/least_squares.f90 against the installed module.
if(FORTRAN_SOURCE)
  run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/fortran_consumer -B ${CONSUMER_BUILD}/fortran
      -G ${GENERATOR} ${toolchain} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
      "-DCMAKE_PREFIX_PATH=${escaped}" -DFORTRAN_SOURCE=${FORTRAN_SOURCE})
  run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD}/fortran)
  run(${CONSUMER_BUILD}/fortran/kopt_fortran_consumer)
endif()

expect_refused(c_only c_only "${prefixes}" "enable CXX in this project too")

# Another Kokkos than the one kopt was built with: a version or a backend set of its own (a
# stand-in KokkosConfig.cmake, found first), refused naming both.
function(other_kokkos name version backends)
  set(dir ${CONSUMER_BUILD}/${name}/lib/cmake/Kokkos)
  file(WRITE ${dir}/KokkosConfigVersion.cmake
       "set(PACKAGE_VERSION ${version})\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
  file(WRITE ${dir}/KokkosConfig.cmake "set(Kokkos_DEVICES \"${backends}\")\n")
  foreach(space ${backends})
    file(APPEND ${dir}/KokkosConfig.cmake "set(Kokkos_ENABLE_${space} ON)\n")
  endforeach()
  list(JOIN backends ", " listed)
  expect_refused(consumer ${name}-build "${CONSUMER_BUILD}/${name};${prefixes}"
                 "kopt was built against Kokkos .* is ${version} with backends ${listed}:")
endfunction()
separate_arguments(KOPT_BACKENDS)
other_kokkos(kokkos_version 9.9.9 "${KOPT_BACKENDS}")
set(other_backends ${KOPT_BACKENDS})  # with CUDA removed, or added
list(FIND other_backends CUDA cuda_at)
if(cuda_at GREATER -1)
  list(REMOVE_ITEM other_backends CUDA)
else()
  list(APPEND other_backends CUDA)
endif()
other_kokkos(kokkos_backends ${KOKKOS_VERSION} "${other_backends}")
# A backend kopt does not run on, beside its own: the whole set is compared, not kopt's three.
other_kokkos(kokkos_hip ${KOKKOS_VERSION} "${KOPT_BACKENDS};HIP")

# Kokkos Kernels of another version (its gemm templates reach the consumer's code too).
set(dir ${CONSUMER_BUILD}/kokkos_kernels_version/lib/cmake/KokkosKernels)
file(WRITE ${dir}/KokkosKernelsConfigVersion.cmake
     "set(PACKAGE_VERSION 9.9.9)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
file(WRITE ${dir}/KokkosKernelsConfig.cmake "")
expect_refused(consumer kokkos_kernels_version-build
               "${CONSUMER_BUILD}/kokkos_kernels_version;${prefixes}"
               "kopt was built against Kokkos Kernels .* is 9.9.9:")

# Kokkos and Kokkos Kernels found where kopt was built, with kopt's prefix alone given.
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD}/kopt_prefix_alone -G ${GENERATOR}
    ${toolchain} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${PREFIX})

# Components: each one kopt has is found where it was built, and refused naming why where
# not; one it does not have is refused naming those it has.
expect_refused(consumer component_unknown "${prefixes}"
               "kopt has no component 'foo' \\(its components: fortran, mpi\\)"
               -DKOPT_COMPONENTS=foo)
foreach(component fortran mpi)
  if(component STREQUAL "fortran" AND FORTRAN_SOURCE OR component STREQUAL "mpi" AND ENABLE_MPI)
    run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD}/component_${component}
        -G ${GENERATOR} ${toolchain} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        "-DCMAKE_PREFIX_PATH=${escaped}" -DKOPT_COMPONENTS=${component})
  else()
    expect_refused(consumer component_${component} "${prefixes}"
                   "kopt was built without its ${component} component"
                   -DKOPT_COMPONENTS=${component})
  endif()
endforeach()
