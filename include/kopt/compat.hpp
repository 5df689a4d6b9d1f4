#pragma once
/// \file
/// The one place that papers over Kokkos API differences between 3.4.01 and 4.x/5.x
/// (see KOKKOS-COMPAT in the project docs). Test KOKKOS_VERSION only: the
/// KOKKOS_VERSION_GREATER_EQUAL macro does not exist in 3.4.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>

namespace kopt::Impl {
/// The correctly rounded square root on every backend, so that a step on the GPU gives the
/// host's bits. Clang's CUDA compiles sqrtf to sqrt.approx.f32 (its libdevice reads
/// __CUDA_PREC_SQRT as 0; seen on an H200 as offloaded groups one ulp off local ones);
/// __fsqrt_rn is sqrt.rn.f32, what nvcc gives by default (-prec-sqrt=true).
KOKKOS_INLINE_FUNCTION float sqrt_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#elif KOKKOS_VERSION >= 30700
  return ::Kokkos::sqrt(x);
#else
  return ::Kokkos::Experimental::sqrt(x);
#endif
}
}  // namespace kopt::Impl
#define KOPT_SQRT ::kopt::Impl::sqrt_rn

/// No-alias qualifier for the kernels' local pointers: without it GCC versions the loop
/// with runtime overlap checks, or gives up vectorizing it.
#if defined(__GNUC__) || defined(__clang__)
#define KOPT_RESTRICT __restrict__
#else
#define KOPT_RESTRICT
#endif

/// A kernel's inner loop compiled as a function of its own (callable from kernels, never
/// inlined): GCC then vectorizes it the same way whatever it sits in.
#if defined(__GNUC__) || defined(__clang__)
#define KOPT_LOOP_FUNCTION KOKKOS_INLINE_FUNCTION __attribute__((noinline))
#else
#define KOPT_LOOP_FUNCTION KOKKOS_INLINE_FUNCTION
#endif

/// Put before a short host loop that must vectorize: keeps GCC from unrolling it completely
/// before its loop vectorizer sees it. Adafactor's update (a few operations per element),
/// unrolled first, was left in scalar instructions: its basic-block vectorizer did not take it.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define KOPT_VECTOR_LOOP _Pragma("GCC unroll 1")
#else
#define KOPT_VECTOR_LOOP
#endif

/// Defined where host code may use GCC and Clang's vector extensions (vector_size,
/// __builtin_shufflevector, __builtin_convertvector): for the reductions whose order the
/// auto-vectorizer will not take (kopt/impl/measure_strip.hpp). Each use has a scalar form
/// with the same bits, which devices run.
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDA__) && !defined(__HIPCC__)
#define KOPT_HAVE_VECTOR_EXTENSIONS 1
#endif

namespace kopt::Impl {

/// Fences `exec`, with a label where Kokkos takes one (3.5+), so tools show who waited.
template <class ExecSpace>
void fence(const ExecSpace& exec, [[maybe_unused]] const std::string& label) {
#if KOKKOS_VERSION >= 30500
  exec.fence(label);
#else
  exec.fence();
#endif
}

/// Bytes the allocations of `views` span (0 for an empty one): what workspace_bytes() adds.
template <class... Views>
std::size_t view_bytes(const Views&... views) {
  return (std::size_t{0} + ... + (views.span() * sizeof(typename Views::value_type)));
}

/// Fences every execution space, labelled where Kokkos takes a label.
inline void fence_all([[maybe_unused]] const std::string& label) {
#if KOKKOS_VERSION >= 30500
  Kokkos::fence(label);
#else
  Kokkos::fence();
#endif
}

/// Asks the host's cache for the line holding `p[ahead]`: a hint, so an address past the
/// end of an array is fine (no fault; the arithmetic is on integers, as a pointer past the
/// end must not be formed). Nothing on devices. kopt's host loops stream several arrays
/// with little work per byte; the hardware prefetcher alone left them at 0.8-0.9 of a
/// plain loop's bandwidth on a 2-core EPYC (see README, Performance).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void prefetch_ahead([[maybe_unused]] const T* p,
                                                [[maybe_unused]] std::int64_t ahead) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) +
                                                   static_cast<std::uintptr_t>(ahead) * sizeof(T)));
#endif
}

/// How far ahead a host pass that only reads (and sums) asks for its stream: 8 KiB. On a
/// 2-core EPYC whose memory reads 60-110 GB/s, Adafactor's norm pass over an 8192 x 8192
/// fp32 grad took 5.9 ms at 2 KiB ahead and 3.9 ms at 8 KiB (4.8 at 4, 3.9 at 16), a plain
/// read 3.4; the bf16 norm pass 4.5 -> 2.8 ms. The grad norm's blocks, at one thread: fp32
/// 10.0 ms at 1 KiB, 7.1 at 8 KiB (a plain read 6.9), bf16 5.3 at 2 KiB, 5.1 at 8 KiB. The
/// 1-2 KiB chosen before were measured on a machine reading 30 GB/s: the faster the
/// memory, the more bytes must be on their way to keep it busy.
inline constexpr std::int64_t read_prefetch_bytes = 8192;

/// True for execution spaces that run on the host CPU (Serial, OpenMP, Threads).
template <class ExecSpace>
inline constexpr bool runs_on_host =
    Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;

}  // namespace kopt::Impl
