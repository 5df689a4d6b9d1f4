# Compile flags for kopt's own targets.

# -Wall -Wextra on kopt's own code; -Werror with kopt_ENABLE_WERROR (CI turns it on).
# Kokkos' headers come in as system headers (imported targets), so their warnings stay out.
function(kopt_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
    if(kopt_ENABLE_WERROR)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
    endif()
    # GCC 12 reports a false -Wrestrict inside std::string for "literal" + string at -O3
    # (GCC bug 105651); it is no finding about kopt's code.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
       AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
    endif()
  endif()
endfunction()

# Flags for code that instantiates kopt's kernels:
# -fno-math-errno: GCC will not vectorize a loop calling sqrt while sqrt may set errno.
# -ffp-contract=off: no FMA contraction, so a vectorized loop and its scalar remainder give the
#   same bits, and Serial and OpenMP builds agree bitwise whatever the thread count.
# -march=native (kopt_ENABLE_NATIVE): the update does a sqrt and a divide per element; with
#   the x86-64 baseline (SSE2, 4 floats per instruction) that arithmetic, not memory, bounds a
#   core with fast memory. Spack builds get their target's flags from Spack itself.
function(kopt_kernel_flags target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno -ffp-contract=off>)
    if(kopt_ENABLE_NATIVE)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
      # With AVX-512, vectors of 16 floats: GCC defaults to 8 (it once lowered clocks). The
      # 16-bit forms' paired loop (kopt/impl/paired_loop.hpp) is compute-bound and runs 1.2x
      # (2^24 elements) to 1.4x (in cache) as fast at 16, one core of the 2-core Xeon; the
      # fp32 loops are unchanged. A no-op on CPUs without AVX-512.
      include(CheckCXXCompilerFlag)
      check_cxx_compiler_flag(-mprefer-vector-width=512 kopt_HAVE_PREFER_VECTOR_WIDTH)
      if(kopt_HAVE_PREFER_VECTOR_WIDTH)
        target_compile_options(${target} PRIVATE
                               $<$<COMPILE_LANGUAGE:CXX>:-mprefer-vector-width=512>)
      endif()
    endif()
  endif()
  # nvcc contracts device code to FMAs by default; without that the device kernels give the
  # host's bits, so an offloaded param (updated on the host) equals one updated on the GPU.
  # (nvcc_wrapper passes --fmad through to nvcc; Clang's CUDA obeys -ffp-contract above.)
  if(Kokkos_ENABLE_CUDA AND CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:--fmad=false>)
  endif()
endfunction()
