// kopt's fp32 AdamW step beside its peers on the same data and threads: the naive scalar loop
// (one thread) and libtorch's torch::optim::AdamW (when built with it). Each keeps state of its
// own and updates its own copy of the same params from the same grads; the three alternate
// inside each iteration so machine noise hits all. x_<peer> = peer time / kopt time.
#include <kopt/kopt.hpp>

#include "common.hpp"
#include "peers.hpp"

namespace kopt_perf {
namespace {

void bm_peers(benchmark::State& state) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  using Mem = Space::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  Space exec;
  const kopt::AdamConfig config{};
  Kokkos::View<float*, Mem> grad("kopt::perf::grad", n), kopt_param("kopt::perf::kopt_param", n);
  Kokkos::View<float*, Mem> naive_param("kopt::perf::naive_param", n);
  Kokkos::View<float*, Mem> torch_param("kopt::perf::torch_param", n);
  fill_random(grad, 2);
  for (const auto& p : {kopt_param, naive_param, torch_param}) fill_random(p, 1);
  kopt::FusedAdam<Space> kopt(exec, config, "kopt::perf");
  kopt.add("w", kopt::Tensor(kopt_param), kopt::Tensor(grad));
  const auto naive = make_naive_peer(naive_param.data(), grad.data(), n, config);
  const auto torch =
      make_libtorch_peer(torch_param.data(), grad.data(), n, config, exec.concurrency());
  kopt.step();  // first touch of every state array, then time
  naive->step();
  if (torch) torch->step();
  double kopt_total = 0.0, naive_total = 0.0, torch_total = 0.0;
  for (auto _ : state) {
    const double t_kopt = seconds(exec, [&] { kopt.step(); });
    const double t_naive = seconds(exec, [&] { naive->step(); });
    const double t_torch = torch ? seconds(exec, [&] { torch->step(); }) : 0.0;
    state.SetIterationTime(t_kopt + t_naive + t_torch);
    kopt_total += t_kopt;
    naive_total += t_naive;
    torch_total += t_torch;
  }
  constexpr double bytes_per_element = update_bytes_per_element<float, float, false>();
  report(state, static_cast<double>(n), bytes_per_element, kopt_total, 0.0, exec.concurrency());
  const double bytes =
      bytes_per_element * static_cast<double>(n) * static_cast<double>(state.iterations());
  state.counters["naive_GB/s"] = bytes / naive_total / 1e9;
  state.counters["x_naive"] = naive_total / kopt_total;
  if (torch) {
    state.counters["libtorch_GB/s"] = bytes / torch_total / 1e9;
    state.counters["x_libtorch"] = torch_total / kopt_total;
  }
}

}  // namespace

void register_peer_benchmarks() {
  const auto sizes = pow2_sizes({20, 24, 26}, {16, 18, 20, 22, 24, 26});
  auto* b =
      add("peers_adamw_fp32/" + space_name<Kokkos::DefaultHostExecutionSpace>(), bm_peers, sizes);
  // An iteration at 2^26 runs all three for ~0.5 s: enough of them for a stable ratio.
  if (!smoke_suite()) b->MinTime(2.0);
}

}  // namespace kopt_perf
