#pragma once
// The memory ceiling of a fused Adam variant: a kernel that loads and stores exactly the
// arrays the update does, in place, with trivial arithmetic, launched the same way (chunks
// on the host, teams on devices). STREAM triad is the wrong ceiling for Adam: its written
// array is not read, so it pays write-allocate traffic that in-place stores do not.

#include <kopt/adam_kernel.hpp>

namespace kopt_perf {

// One element: the same loads and stores as the fused update, arithmetic that keeps the
// values (c is 0 at run time, which the compiler cannot know).
// fp32:  read p, g, m, v; write p, m, v                       (28 B/element)
// 16-bit: read g, master, m, v; write master, m, v, param     (28 B/element)
template <class ParamT, class GradT>
KOKKOS_FORCEINLINE_FUNCTION void ceiling_element(std::int64_t i, ParamT* KOPT_RESTRICT p,
                                                 const GradT* KOPT_RESTRICT g,
                                                 float* KOPT_RESTRICT w, float* KOPT_RESTRICT m,
                                                 float* KOPT_RESTRICT v, float c) {
  const float gi = c * kopt::Impl::to_float(g[i]);
  m[i] += gi;
  v[i] += gi;
  if constexpr (std::is_same_v<ParamT, float>) {
    p[i] += gi;
  } else {
    const float x = w[i] + gi;
    w[i] = x;
    p[i] = ParamT{static_cast<std::uint16_t>(kopt::Impl::float_bits(x) >> 16)};
  }
}

// The host loop, built like kopt's (its own function, restrict parameters, unit stride).
template <class ParamT, class GradT>
KOPT_LOOP_FUNCTION void ceiling_host_loop(std::int64_t begin, std::int64_t end,
                                          ParamT* KOPT_RESTRICT p, const GradT* KOPT_RESTRICT g,
                                          float* KOPT_RESTRICT w, float* KOPT_RESTRICT m,
                                          float* KOPT_RESTRICT v, float c) {
  for (std::int64_t i = begin; i < end; ++i) ceiling_element(i, p, g, w, m, v, c);
}

template <class ExecSpace, class ParamT, class GradT>
struct CeilingFunctor {
  ParamT* param;
  const GradT* grad;
  float* master;
  float* m;
  float* v;
  std::int64_t n;
  float c;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
    const std::int64_t begin = chunk * size;
    ceiling_host_loop(begin, begin + size < n ? begin + size : n, param, grad, master, m, v, c);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
    const std::int64_t begin = team.league_rank() * size;
    const std::int64_t end = begin + size < n ? begin + size : n;
    for (std::int64_t i = begin + team.team_rank(); i < end; i += team.team_size())
      ceiling_element(i, param, grad, master, m, v, c);
  }
};

template <class ExecSpace, class ParamT, class GradT>
void run_ceiling(const ExecSpace& exec, const CeilingFunctor<ExecSpace, ParamT, GradT>& f) {
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  kopt::Impl::launch_chunks(exec, "kopt::perf::ceiling", (f.n + size - 1) / size, f);
}

}  // namespace kopt_perf
