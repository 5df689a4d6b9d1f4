#pragma once
// The memory ceiling of a fused Adam variant: a kernel that loads and stores exactly the
// arrays the update does, in place, with trivial arithmetic, launched the same way (chunks
// on the host, teams on devices). STREAM triad is the wrong ceiling for Adam: its written
// array is not read, so it pays write-allocate traffic that in-place stores do not.

#include <kopt/adam_kernel.hpp>

namespace kopt_perf {

// fp32:  read p, g, m, v; write p, m, v                       (28 B/element)
// 16-bit: read g, master, m, v; write master, m, v, param     (28 B/element)
template <class ExecSpace, class ParamT, class GradT>
struct CeilingFunctor {
  ParamT* param;
  const GradT* grad;
  float* master;
  float* m;
  float* v;
  std::int64_t n;
  float c;  // 0 at run time: values stay put, but the compiler must still do the traffic

  KOKKOS_FORCEINLINE_FUNCTION void run(std::int64_t begin, std::int64_t end,
                                       std::int64_t stride) const {
    ParamT* KOPT_RESTRICT p = param;
    const GradT* KOPT_RESTRICT g = grad;
    float* KOPT_RESTRICT w = master;
    float* KOPT_RESTRICT mm = m;
    float* KOPT_RESTRICT vv = v;
    for (std::int64_t i = begin; i < end; i += stride) {
      const float gi = c * kopt::Impl::to_float(g[i]);
      mm[i] += gi;
      vv[i] += gi;
      if constexpr (std::is_same_v<ParamT, float>) {
        p[i] += gi;
      } else {
        const float x = w[i] + gi;
        w[i] = x;
        p[i] = ParamT{static_cast<std::uint16_t>(kopt::Impl::float_bits(x) >> 16)};
      }
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
    const std::int64_t begin = chunk * size;
    run(begin, begin + size < n ? begin + size : n, 1);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
    const std::int64_t begin = team.league_rank() * size;
    run(begin + team.team_rank(), begin + size < n ? begin + size : n, team.team_size());
  }
};

template <class ExecSpace, class ParamT, class GradT>
void run_ceiling(const ExecSpace& exec, const CeilingFunctor<ExecSpace, ParamT, GradT>& f) {
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  kopt::Impl::launch_chunks(exec, "kopt::perf::ceiling", (f.n + size - 1) / size, f);
}

}  // namespace kopt_perf
