#pragma once
// What every benchmark of the suite shares: the suite (quick default or --full), the sizes it
// runs, timing on an execution space, reproducible random data, the byte model of each
// variant and the counters every row reports.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <kopt/impl/backends.hpp>
#include <kopt/kopt.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "plain_loops.hpp"

namespace kopt_perf {

/// The default suite is a subset that runs in a few minutes on a 2-core machine; --full runs
/// every size and variant on every enabled space; --smoke runs the default rows at sizes
/// divided by 2^10 (the smoke test: every benchmark once, in seconds).
bool full_suite();
bool smoke_suite();
/// Removes --full / --smoke from the command line, remembering them.
void take_suite_flags(int& argc, char** argv);
/// n, or n / 2^10 (at least 1) under --smoke.
std::int64_t scaled(std::int64_t n);
/// scaled(2^e) for each exponent: `quick`, or `full` under --full.
std::vector<std::int64_t> pow2_sizes(const std::vector<int>& quick, const std::vector<int>& full);
/// Adds the context every result file carries (Google Benchmark's custom context).
void add_context();

/// Wall time of `work` on `exec`, the queue drained before and after.
template <class ExecSpace, class Work>
double seconds(const ExecSpace& exec, Work&& work) {
  exec.fence();
  const auto t0 = std::chrono::steady_clock::now();
  work();
  exec.fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Fills `v` with values uniform in [-1, 1) from a counter-based hash of (seed, index): the
/// same values on every space and thread count, written in parallel where the View lives (so
/// pages are first touched by the threads that later use them).
template <class View>
void fill_random(const View& v, std::uint32_t seed) {
  using T = typename View::non_const_value_type;
  using Exec = typename View::execution_space;
  const View view = v;
  Kokkos::parallel_for(
      "kopt::perf::fill",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(0, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::uint64_t x = (static_cast<std::uint64_t>(seed) << 40) ^ static_cast<std::uint64_t>(i);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64 finalizer
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        x ^= x >> 31;
        const float u = static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
        view(i) = kopt::Impl::from_float<T>(u);
      });
  Kokkos::fence();
}

/// Bytes one fused update moves per element (DESIGN, performance model): grad read; m and v
/// read and written; the amsgrad max read and written; an fp32 param read and written, or
/// for a 16-bit param its fp32 master read and written and the param written.
/// Bytes per element of one fused update that keeps state arrays `arrays` (bit k: array k):
/// grad read, param (or its fp32 master) read and written, the 16-bit param written, and
/// each state array read and written.
template <class ParamT, class GradT>
constexpr double update_bytes(unsigned arrays) {
  const double param = std::is_same_v<ParamT, float> ? 8.0 : 8.0 + sizeof(ParamT);
  double state = 0.0;
  for (; arrays != 0; arrays &= arrays - 1) state += 8.0;
  return sizeof(GradT) + state + param;
}

/// The same for Adam (28 B for fp32 and for 16-bit params with masters; +8 with amsgrad).
template <class ParamT, class GradT, bool Amsgrad>
constexpr double update_bytes_per_element() {
  return update_bytes<ParamT, GradT>(Amsgrad ? 7u : 3u);
}

/// The counters of a row measured against a ceiling: elements and bytes per second of kopt's
/// kernel, the ceiling's bytes per second for the same pattern, and the fraction reached.
inline void report(benchmark::State& state, double elements, double bytes_per_element,
                   double kopt_seconds, double ceiling_seconds, int threads) {
  const double iters = static_cast<double>(state.iterations());
  const double bytes = bytes_per_element * elements * iters;
  state.counters["Gelem/s"] = elements * iters / kopt_seconds / 1e9;
  state.counters["GB/s"] = bytes / kopt_seconds / 1e9;
  state.counters["B/elem"] = bytes_per_element;
  if (ceiling_seconds > 0) {
    state.counters["ceil_GB/s"] = bytes / ceiling_seconds / 1e9;
    state.counters["of_ceiling"] = ceiling_seconds / kopt_seconds;
  }
  state.counters["threads"] = threads;
}

/// kopt against the plain loop of the same work (perf/plain_loops.hpp), timed in the same
/// iterations: x_plain = plain time / kopt time (above 1: kopt is faster).
inline void report_plain(benchmark::State& state, double plain_seconds, double kopt_seconds) {
  state.counters["x_plain"] = plain_seconds / kopt_seconds;
}

/// The plain loops' name for a kopt storage type.
template <class T>
constexpr plain::Elem elem_of() {
  return std::is_same_v<T, float>            ? plain::Elem::f32
         : std::is_same_v<T, kopt::bfloat16> ? plain::Elem::bf16
                                             : plain::Elem::f16;
}

/// "Serial", "OpenMP", "Cuda": the name rows carry for a space.
template <class ExecSpace>
std::string space_name() {
  return ExecSpace::name();
}

/// Registers `fn` as a manual-time row named `name` for each argument in `args`.
template <class Fn>
benchmark::internal::Benchmark* add(const std::string& name, Fn fn,
                                    const std::vector<std::int64_t>& args = {}) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn);
  for (const auto a : args) b->Arg(a);
  return b->UseManualTime()->Unit(benchmark::kMillisecond);
}

/// Calls f(std::type_identity<Space>{}) for each execution space Kokkos enables, host first.
template <class F>
void for_each_space(F&& f) {
  kopt::Impl::for_each_backend(std::forward<F>(f));
}

/// The quick suite runs one-thread Serial rows at one size only: the same kernel as OpenMP.
template <class ExecSpace>
constexpr bool is_serial() {
#ifdef KOKKOS_ENABLE_SERIAL
  return std::is_same_v<ExecSpace, Kokkos::Serial>;
#else
  return false;
#endif
}

/// The suite's parts; each registers its rows for the enabled spaces.
void register_update_benchmarks();
void register_algorithm_benchmarks();
void register_tensor_split_benchmarks();
void register_norm_and_hybrid_benchmarks();
void register_peer_benchmarks();
void register_offload_benchmarks();
void register_many_params_benchmarks();

}  // namespace kopt_perf
