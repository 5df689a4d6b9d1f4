// The global grad norm against a read-only ceiling, and HybridOptimizer::step() end to end:
// with clipping and loss scaling on (the norm pass, the overflow check, the scaled update)
// against the ceiling of its two passes (read the grads; the update's pattern) and against the
// same step without them; on a device build, host and device groups in one step.
#include <algorithm>
#include <cmath>
#include <kopt/kopt.hpp>

#include "ceiling.hpp"
#include "common.hpp"

namespace kopt_perf {
namespace {

template <class ExecSpace, class GradT>
void bm_grad_norm(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<float*, Mem> param("kopt::perf::param", n);
  Kokkos::View<GradT*, Mem> grad("kopt::perf::grad", n);
  fill_random(grad, 2);
  kopt::FusedAdam<ExecSpace> opt(exec, kopt::AdamConfig{}, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  const auto read = make_read<ExecSpace>(grad.data(), n);
  benchmark::DoNotOptimize(opt.grad_sum_of_squares());
  constexpr bool host = kopt::Impl::runs_on_host<ExecSpace>;
  const auto plain_norm = [&] {
    benchmark::DoNotOptimize(
        plain::sum_of_squares(grad.data(), elem_of<GradT>(), n, exec.concurrency()));
  };
  double kopt_total = 0.0, ceiling_total = 0.0, plain_total = 0.0;
  for (auto _ : state) {
    ceiling_total += seconds(exec, [&] { run_read(exec, read); });
    if (host) plain_total += seconds(exec, plain_norm);
    const double t = seconds(exec, [&] { benchmark::DoNotOptimize(opt.grad_sum_of_squares()); });
    state.SetIterationTime(t);
    kopt_total += t;
  }
  report(state, static_cast<double>(n), sizeof(GradT), kopt_total, ceiling_total,
         exec.concurrency());
  if (host) report_plain(state, plain_total, kopt_total);
}

// One host group of n elements (ParamT params and grads), stepped with max_grad_norm (never
// binding, so it is computed and applied) and dynamic loss scaling, vs without them.
template <class ParamT>
void bm_hybrid_clipped(benchmark::State& state) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  using Mem = Space::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  const auto make = [&](bool clip) {
    kopt::ParamGroup g;
    g.add("w", kopt::Tensor(param), kopt::Tensor(grad));
    kopt::HybridOptions options;
    if (clip) {
      options.max_grad_norm = 1e9;
      options.loss_scaling = kopt::LossScalerOptions{.init_scale = 1.0};
    }
    return kopt::HybridOptimizer({g}, options);
  };
  kopt::HybridOptimizer plain = make(false), clipped = make(true);
  plain.step();
  clipped.step();
  // The ceiling's own state arrays: the same pattern on arrays of the same size.
  Kokkos::View<float*, Mem> master("kopt::perf::master", std::is_same_v<ParamT, float> ? 0 : n);
  Kokkos::View<float*, Mem> m("kopt::perf::m", n), v("kopt::perf::v", n);
  const UpdatePattern<ParamT, ParamT, adam_arrays(false)> update{
      param.data(), grad.data(), master.data(), m.data(), v.data(), nullptr};
  const auto read = make_read<Space>(grad.data(), n);
  Space exec;
  // The plain loops of the same clipped step: the norm, then the update with the grads scaled.
  plain::AdamW loop(elem_of<ParamT>(), elem_of<ParamT>(), false, n, exec.concurrency());
  const auto plain_clipped = [&] {
    const double norm =
        std::sqrt(plain::sum_of_squares(grad.data(), elem_of<ParamT>(), n, exec.concurrency()));
    loop.step(grad.data(), static_cast<float>(std::min(1.0, 1e9 / (norm + 1e-6))));
  };
  plain_clipped();
  double plain_total = 0.0, clipped_total = 0.0, ceiling_total = 0.0, loop_total = 0.0;
  for (auto _ : state) {
    ceiling_total +=
        seconds(exec, [&] { run_read(exec, read); }) + ceiling_seconds(exec, update, n);
    loop_total += seconds(exec, plain_clipped);
    plain_total += seconds(exec, [&] { plain.step(); });
    const double t = seconds(exec, [&] { clipped.step(); });
    state.SetIterationTime(t);
    clipped_total += t;
  }
  report(state, static_cast<double>(n),
         update_bytes_per_element<ParamT, ParamT, false>() + sizeof(ParamT), clipped_total,
         ceiling_total, exec.concurrency());
  state.counters["of_plain_step"] = plain_total / clipped_total;
  report_plain(state, loop_total, clipped_total);
}

#ifdef KOKKOS_ENABLE_CUDA
// Half the elements in a host group, half in a device group, one step(): the engines of both
// run at once, so the step should cost about the slower of the two alone (of_slower ~ 1).
void bm_hybrid_host_and_device(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0)) / 2;
  Kokkos::View<float*, Kokkos::HostSpace> hp("kopt::perf::hp", n), hg("kopt::perf::hg", n);
  Kokkos::View<float*, Kokkos::CudaSpace> dp("kopt::perf::dp", n), dg("kopt::perf::dg", n);
  fill_random(hp, 1);
  fill_random(hg, 2);
  fill_random(dp, 1);
  fill_random(dg, 2);
  kopt::ParamGroup host, device;
  host.add("h", kopt::Tensor(hp), kopt::Tensor(hg));
  device.add("d", kopt::Tensor(dp), kopt::Tensor(dg));
  kopt::HybridOptimizer both({host, device}), host_only({host}), device_only({device});
  both.step();
  host_only.step();
  device_only.step();
  Kokkos::DefaultHostExecutionSpace exec;
  double both_total = 0.0, host_total = 0.0, device_total = 0.0;
  for (auto _ : state) {
    host_total += seconds(exec, [&] { host_only.step(); });
    device_total += seconds(exec, [&] { device_only.step(); });
    const double t = seconds(exec, [&] { both.step(); });
    state.SetIterationTime(t);
    both_total += t;
  }
  report(state, 2.0 * static_cast<double>(n), update_bytes_per_element<float, float, false>(),
         both_total, 0.0, exec.concurrency());
  state.counters["of_slower"] = std::max(host_total, device_total) / both_total;
}
#endif

}  // namespace

void register_norm_and_hybrid_benchmarks() {
  const auto sizes = pow2_sizes({26}, {20, 24, 26});
  for_each_space([&](auto tag) {
    using S = typename decltype(tag)::type;
    if (!full_suite() && is_serial<S>()) return;
    add("grad_norm_fp32/" + space_name<S>(), bm_grad_norm<S, float>, sizes);
    add("grad_norm_bf16/" + space_name<S>(), bm_grad_norm<S, kopt::bfloat16>, sizes);
  });
  add("hybrid_clip_loss_scale_fp32/host", bm_hybrid_clipped<float>, sizes);
  add("hybrid_clip_loss_scale_bf16_master/host", bm_hybrid_clipped<kopt::bfloat16>, sizes);
#ifdef KOKKOS_ENABLE_CUDA
  add("hybrid_host_and_device_fp32/Cuda", bm_hybrid_host_and_device, sizes);
#endif
}

}  // namespace kopt_perf
