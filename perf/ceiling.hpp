#pragma once
// Memory ceilings, measured in the same run as the kernels they bound: streaming kernels with
// exactly a variant's access pattern (the same arrays loaded and stored in place, trivial
// arithmetic), launched like kopt's (chunks of a range on the host, teams on devices). STREAM
// copy and triad are reported too, for reference only: triad's written array is not read, so
// it pays a write-allocate read that in-place stores do not, and is the wrong ceiling for Adam.

#include <algorithm>
#include <array>
#include <kopt/fused_adam.hpp>
#include <kopt/impl/update_kernel.hpp>

#include "common.hpp"

namespace kopt_perf {

// The value a pattern reads: the element itself, or a 16-bit element's bits (a conversion
// would be arithmetic the ceiling must not pay).
KOKKOS_FORCEINLINE_FUNCTION float raw_value(float x) { return x; }
KOKKOS_FORCEINLINE_FUNCTION float raw_value(std::uint16_t x) { return static_cast<float>(x); }
// A q8 array's codes (StateT = std::uint8_t) streamed as n bytes: its blocks' scales, 4 bytes
// per 256 codes, are left out (0.4% of a 14-byte step's traffic), so the index stays i and
// the loop vectorizes.
KOKKOS_FORCEINLINE_FUNCTION float raw_value(std::uint8_t x) { return static_cast<float>(x); }
template <class T>
KOKKOS_FORCEINLINE_FUNCTION float raw_value(T x) {
  return static_cast<float>(x.bits);
}

// One element of a fused update's pattern with the state arrays in `Arrays` (bit k: array
// k, as a policy keeps them: Adam 3, with amsgrad 7; SGD with momentum, Lion, Adagrad 1); c is
// 0 at run time, which the compiler cannot know, so every value is kept. 16-bit params: the
// master is read and written and the param only written (a truncation stands for the
// rounding); a master kept as a remainder (MasterT = std::uint16_t) is read and written
// with the param, both read and written; without a master (MasterT =
// kopt::Impl::RoundToNearest) the param alone is read and written. 16-bit state arrays
// (StateT for array 0, State1T for arrays 1 and 2) are read and written as 16 bits.
template <class StateT>
KOKKOS_FORCEINLINE_FUNCTION void add_to(StateT& x, float gi) {
  if constexpr (std::is_same_v<StateT, float>)
    x += gi;
  else if constexpr (std::is_same_v<StateT, std::uint8_t>)
    x = static_cast<std::uint8_t>(kopt::Impl::float_bits(raw_value(x) + gi) >> 24);
  else
    x = StateT{static_cast<std::uint16_t>(kopt::Impl::float_bits(raw_value(x) + gi) >> 16)};
}

template <class ParamT, class GradT, unsigned Arrays, class MasterT = float, class StateT = float,
          class State1T = StateT>
KOKKOS_FORCEINLINE_FUNCTION void update_pattern(std::int64_t i, ParamT* KOPT_RESTRICT p,
                                                const GradT* KOPT_RESTRICT g,
                                                MasterT* KOPT_RESTRICT w, StateT* KOPT_RESTRICT s0,
                                                State1T* KOPT_RESTRICT s1,
                                                State1T* KOPT_RESTRICT s2, float c) {
  const float gi = c * raw_value(g[i]);
  if constexpr ((Arrays & 1u) != 0) add_to(s0[i], gi);
  if constexpr ((Arrays & 2u) != 0) add_to(s1[i], gi);
  if constexpr ((Arrays & 4u) != 0) add_to(s2[i], gi);
  if constexpr (std::is_same_v<ParamT, float>) {
    p[i] += gi;
  } else if constexpr (std::is_same_v<MasterT, kopt::Impl::RoundToNearest>) {
    p[i] = ParamT{static_cast<std::uint16_t>(kopt::Impl::float_bits(raw_value(p[i]) + gi) >> 16)};
  } else if constexpr (std::is_same_v<MasterT, std::uint16_t>) {
    const std::uint32_t x = kopt::Impl::float_bits(raw_value(p[i]) + raw_value(w[i]) + gi);
    w[i] = static_cast<std::uint16_t>(x);
    p[i] = ParamT{static_cast<std::uint16_t>(x >> 16)};
  } else {
    const float x = w[i] + gi;
    w[i] = x;
    p[i] = ParamT{static_cast<std::uint16_t>(kopt::Impl::float_bits(x) >> 16)};
  }
}

// The host loop over a chunk, built like kopt's (a function of its own, restrict parameters).
// Prefetch: in blocks of 16 after asking for every streamed array 512 elements ahead, as
// kopt's own loop does for updates with state. Which form streams faster depends on the
// machine and the pattern (2-core Xeon, 2^26: bf16 Adam 25.6 -> 28.0 GB/s with the requests,
// 20-byte fp32 patterns 25.3 -> 24.2), so the ceiling is the faster of the two
// (ceiling_seconds).
template <bool Prefetch, class ParamT, class GradT, unsigned Arrays, class MasterT, class StateT,
          class State1T>
KOPT_LOOP_FUNCTION void update_pattern_loop(std::int64_t begin, std::int64_t end,
                                            ParamT* KOPT_RESTRICT p, const GradT* KOPT_RESTRICT g,
                                            MasterT* KOPT_RESTRICT w, StateT* KOPT_RESTRICT s0,
                                            State1T* KOPT_RESTRICT s1, State1T* KOPT_RESTRICT s2,
                                            float c) {
  using kopt::Impl::prefetch_ahead;
  constexpr int block = kopt::Impl::update_prefetch_stride;
  std::int64_t i = begin;
  if constexpr (Prefetch) {
    for (; i + block <= end; i += block) {
      const std::int64_t a = i + kopt::Impl::update_prefetch_elements;
      prefetch_ahead(p, a);
      prefetch_ahead(g, a);
      if constexpr (!std::is_same_v<ParamT, float> &&
                    !std::is_same_v<MasterT, kopt::Impl::RoundToNearest>)
        prefetch_ahead(w, a);
      if constexpr ((Arrays & 1u) != 0) prefetch_ahead(s0, a);
      if constexpr ((Arrays & 2u) != 0) prefetch_ahead(s1, a);
      if constexpr ((Arrays & 4u) != 0) prefetch_ahead(s2, a);
      for (int k = 0; k < block; ++k)
        update_pattern<ParamT, GradT, Arrays, MasterT, StateT, State1T>(i + k, p, g, w, s0, s1, s2,
                                                                        c);
    }
  }
  for (; i < end; ++i)
    update_pattern<ParamT, GradT, Arrays, MasterT, StateT, State1T>(i, p, g, w, s0, s1, s2, c);
}

/// The pattern of one fused update variant over the arrays of a tensor's state.
template <class ParamT, class GradT, unsigned Arrays, class MasterT = float, class StateT = float,
          class State1T = StateT>
struct UpdatePattern {
  ParamT* param;
  const GradT* grad;
  MasterT* master;  // 16-bit params only
  StateT* s0;
  State1T* s1;
  State1T* s2;
  float c = 0.0f;
  bool prefetch = false;  // the host loop's form (update_pattern_loop)
  KOKKOS_INLINE_FUNCTION void element(std::int64_t i) const {
    update_pattern<ParamT, GradT, Arrays, MasterT, StateT, State1T>(i, param, grad, master, s0, s1,
                                                                    s2, c);
  }
  KOKKOS_INLINE_FUNCTION void range(std::int64_t begin, std::int64_t end) const {
    if (prefetch)
      update_pattern_loop<true, ParamT, GradT, Arrays, MasterT, StateT, State1T>(
          begin, end, param, grad, master, s0, s1, s2, c);
    else
      update_pattern_loop<false, ParamT, GradT, Arrays, MasterT, StateT, State1T>(
          begin, end, param, grad, master, s0, s1, s2, c);
  }
};

/// Adam's state arrays: the moments, and the max with amsgrad.
constexpr unsigned adam_arrays(bool amsgrad) { return amsgrad ? 7u : 3u; }

/// The pattern over the arrays of one tensor's state in a FusedOptimizer (its own param and
/// grad): `s` is FusedOptimizer::state(), arrays[k] for bit k of Arrays.
template <class ParamT, class GradT, unsigned Arrays, class State>
UpdatePattern<ParamT, GradT, Arrays> pattern_of(ParamT* param, const GradT* grad, const State& s) {
  // No compare where the policy has no arrays (Adafactor): nvcc warns that k < 0 is pointless.
  constexpr std::size_t n = std::tuple_size_v<decltype(State::arrays)>;
  const auto at = [&](std::size_t k) -> float* {
    if constexpr (n == 0)
      return nullptr;
    else
      return k < n ? const_cast<float*>(s.arrays[k].data()) : nullptr;
  };
  return {param, grad, const_cast<float*>(s.master.data()), at(0), at(1), at(2)};
}

/// The same over a FusedAdam's state, by Adam's names.
template <class ParamT, class GradT, unsigned Arrays, class MemSpace>
UpdatePattern<ParamT, GradT, Arrays> pattern_of(ParamT* param, const GradT* grad,
                                                const kopt::AdamStateView<MemSpace>& s) {
  const auto ptr = [](const auto& view) { return const_cast<float*>(view.data()); };
  return {param, grad, ptr(s.master), ptr(s.exp_avg), ptr(s.exp_avg_sq), ptr(s.max_exp_avg_sq)};
}

KOPT_LOOP_FUNCTION void copy_loop(std::int64_t begin, std::int64_t end, float* KOPT_RESTRICT a,
                                  const float* KOPT_RESTRICT b) {
  for (std::int64_t i = begin; i < end; ++i) a[i] = b[i];
}

KOPT_LOOP_FUNCTION void triad_loop(std::int64_t begin, std::int64_t end, float* KOPT_RESTRICT a,
                                   const float* KOPT_RESTRICT b, const float* KOPT_RESTRICT c,
                                   float s) {
  for (std::int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
}

/// STREAM copy a = b (8 B/element counted).
struct CopyPattern {
  float* a;
  const float* b;
  KOKKOS_INLINE_FUNCTION void element(std::int64_t i) const { a[i] = b[i]; }
  KOKKOS_INLINE_FUNCTION void range(std::int64_t begin, std::int64_t end) const {
    copy_loop(begin, end, a, b);
  }
};

/// STREAM triad a = b + s c (12 B/element counted; the hardware also reads a).
struct TriadPattern {
  float* a;
  const float* b;
  const float* c;
  float s = 3.0f;
  KOKKOS_INLINE_FUNCTION void element(std::int64_t i) const { a[i] = b[i] + s * c[i]; }
  KOKKOS_INLINE_FUNCTION void range(std::int64_t begin, std::int64_t end) const {
    triad_loop(begin, end, a, b, c, s);
  }
};

/// Runs a pattern over n elements in kopt's chunks on a space.
template <class ExecSpace, class Pattern>
struct PatternFunctor {
  Pattern pattern;
  std::int64_t n;
  static constexpr std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const std::int64_t begin = chunk * size;
    pattern.range(begin, begin + size < n ? begin + size : n);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t begin = team.league_rank() * size;
    const std::int64_t end = begin + size < n ? begin + size : n;
    for (std::int64_t i = begin + team.team_rank(); i < end; i += team.team_size())
      pattern.element(i);
  }
};

template <class ExecSpace, class Pattern>
void run_pattern(const ExecSpace& exec, const Pattern& pattern, std::int64_t n) {
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  kopt::Impl::launch_chunks(exec, "kopt::perf::ceiling", (n + size - 1) / size,
                            PatternFunctor<ExecSpace, Pattern>{pattern, n});
}

/// Seconds of an update pattern over n elements: on the host, the faster of its two loop forms
/// (with and without software prefetch), each run once, so the ceiling is not a form kopt's
/// own loop happens to beat; on devices, where prefetch_ahead is nothing, one run.
template <class ExecSpace, class ParamT, class GradT, unsigned Arrays, class MasterT, class StateT,
          class State1T>
double ceiling_seconds(const ExecSpace& exec,
                       UpdatePattern<ParamT, GradT, Arrays, MasterT, StateT, State1T> pattern,
                       std::int64_t n) {
  pattern.prefetch = false;
  const double plain = seconds(exec, [&] { run_pattern(exec, pattern, n); });
  if constexpr (!kopt::Impl::runs_on_host<ExecSpace>) {
    return plain;
  } else {
    pattern.prefetch = true;
    return std::min(plain, seconds(exec, [&] { run_pattern(exec, pattern, n); }));
  }
}

/// A row of kopt's `step` beside the ceiling of `pattern` over n elements, alternating in
/// every iteration, reported at `bytes_per_element`.
template <class ExecSpace, class Pattern, class Step>
void time_beside_ceiling(benchmark::State& state, const ExecSpace& exec, const Pattern& pattern,
                         std::int64_t n, double bytes_per_element, Step&& step) {
  run_pattern(exec, pattern, n);
  double kopt_total = 0.0, ceiling_total = 0.0;
  for (auto _ : state) {
    ceiling_total += ceiling_seconds(exec, pattern, n);
    const double t = seconds(exec, step);
    state.SetIterationTime(t);
    kopt_total += t;
  }
  report(state, static_cast<double>(n), bytes_per_element, kopt_total, ceiling_total,
         exec.concurrency());
}

/// Read-only: the sum of a chunk of grads in 16 float lanes (vectorizes without
/// reassociation), the pattern of the global grad norm. One partial per chunk.
template <class GradT>
KOPT_LOOP_FUNCTION float read_loop(const GradT* KOPT_RESTRICT g, std::int64_t begin,
                                   std::int64_t end) {
  float lane[16] = {};
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16)
    for (int k = 0; k < 16; ++k) lane[k] += raw_value(g[i + k]);
  float sum = 0.0f;
  for (; i < end; ++i) sum += raw_value(g[i]);
  for (int k = 0; k < 16; ++k) sum += lane[k];
  return sum;
}

template <class ExecSpace, class GradT>
struct ReadFunctor {
  const GradT* grad;
  Kokkos::View<float*, typename ExecSpace::memory_space> partials;
  std::int64_t n;
  static constexpr std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const std::int64_t begin = chunk * size;
    partials(chunk) = read_loop(grad, begin, begin + size < n ? begin + size : n);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t begin = team.league_rank() * size;
    const std::int64_t end = begin + size < n ? begin + size : n;
    float sum = 0.0f;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, begin, end),
        [&](const std::int64_t i, float& acc) { acc += raw_value(grad[i]); }, sum);
    if (team.team_rank() == 0) partials(team.league_rank()) = sum;
  }
};

template <class ExecSpace, class GradT>
void run_read(const ExecSpace& exec, const ReadFunctor<ExecSpace, GradT>& f) {
  kopt::Impl::launch_chunks(exec, "kopt::perf::read_ceiling", f.partials.extent(0), f);
}

template <class ExecSpace, class GradT>
ReadFunctor<ExecSpace, GradT> make_read(const GradT* grad, std::int64_t n) {
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  return {grad,
          Kokkos::View<float*, typename ExecSpace::memory_space>("kopt::perf::partials",
                                                                 (n + size - 1) / size),
          n};
}

}  // namespace kopt_perf
