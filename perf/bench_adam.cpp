// The fused Adam step on every enabled space, each measured beside its memory ceiling in
// the same run (see ceiling.hpp): rates, bytes/s (28 B/element, see DESIGN) and the fraction
// of the ceiling. Timings alternate between the two kernels so machine noise hits both.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <kopt/kopt.hpp>
#include <random>
#include <string>
#include <thread>

#include "ceiling.hpp"

namespace {

constexpr double kBytesPerElement = 28.0;

template <class ExecSpace>
double seconds(const ExecSpace& exec, auto&& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  exec.fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class View>
void fill_random(const View& v, unsigned seed) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  using T = typename View::value_type;
  for (std::size_t i = 0; i < h.extent(0); ++i) h(i) = kopt::Impl::from_float<T>(dist(rng));
  Kokkos::deep_copy(v, h);
}

// Fused step of one tensor of n elements (ParamT param, GradT grad) vs its ceiling.
template <class ExecSpace, class ParamT, class GradT>
void bm_fused_step(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n);
  Kokkos::View<GradT*, Mem> grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedAdam<ExecSpace> opt(exec, kopt::AdamConfig{}, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();  // allocates and first-touches the state (in parallel, like every step)
  const auto s = opt.state("w");
  kopt_perf::CeilingFunctor<ExecSpace, ParamT, GradT> ceiling{
      param.data(),
      grad.data(),
      const_cast<float*>(s.master.data()),
      const_cast<float*>(s.exp_avg.data()),
      const_cast<float*>(s.exp_avg_sq.data()),
      n,
      0.0f};
  kopt_perf::run_ceiling(exec, ceiling);
  exec.fence();
  double adam_total = 0.0, ceiling_total = 0.0;
  for (auto _ : state) {
    const double t_ceiling = seconds(exec, [&] { kopt_perf::run_ceiling(exec, ceiling); });
    const double t_adam = seconds(exec, [&] { opt.step(); });
    state.SetIterationTime(t_adam);
    adam_total += t_adam;
    ceiling_total += t_ceiling;
  }
  const double iters = static_cast<double>(state.iterations());
  const double bytes = kBytesPerElement * static_cast<double>(n) * iters;
  state.counters["Gelem/s"] = static_cast<double>(n) * iters / adam_total / 1e9;
  state.counters["GB/s"] = bytes / adam_total / 1e9;
  state.counters["ceil_GB/s"] = bytes / ceiling_total / 1e9;
  state.counters["of_ceiling"] = ceiling_total / adam_total;
  state.counters["threads"] = exec.concurrency();
}

// 10,000 tensors of mixed sizes vs one tensor of the same total size: the chunk table makes
// them cost the same (of_one_tensor ~ 1). Each tensor starts on a 64-byte boundary, as
// framework allocators and flat parameter buffers place them.
template <class ExecSpace>
void bm_many_tensors(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  constexpr int kTensors = 10000;
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> size(1, 3200);  // mean ~1600: 16M elements
  std::vector<std::int64_t> sizes(kTensors), offsets(kTensors);
  std::int64_t payload = 0, total = 0;
  for (int t = 0; t < kTensors; ++t) {
    sizes[t] = size(rng);
    offsets[t] = total;
    payload += sizes[t];
    total += (sizes[t] + 15) / 16 * 16;
  }
  ExecSpace exec;
  Kokkos::View<float*, Mem> param("kopt::perf::param", total), grad("kopt::perf::grad", total);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedAdam<ExecSpace> many(exec, kopt::AdamConfig{}, "kopt::perf::many");
  kopt::FusedAdam<ExecSpace> one(exec, kopt::AdamConfig{}, "kopt::perf::one");
  for (int t = 0; t < kTensors; ++t) {
    const auto range = std::make_pair(offsets[t], offsets[t] + sizes[t]);
    char name[32];
    std::snprintf(name, sizeof name, "t%d", t);
    many.add(name, kopt::Tensor(Kokkos::subview(param, range)),
             kopt::Tensor(Kokkos::subview(grad, range)));
  }
  const auto all = std::make_pair(std::int64_t{0}, payload);
  one.add("all", kopt::Tensor(Kokkos::subview(param, all)),
          kopt::Tensor(Kokkos::subview(grad, all)));
  many.step();
  one.step();
  exec.fence();
  double many_total = 0.0, one_total = 0.0;
  for (auto _ : state) {
    const double t_one = seconds(exec, [&] { one.step(); });
    const double t_many = seconds(exec, [&] { many.step(); });
    state.SetIterationTime(t_many);
    many_total += t_many;
    one_total += t_one;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["Gelem/s"] = static_cast<double>(payload) * iters / many_total / 1e9;
  state.counters["GB/s"] =
      kBytesPerElement * static_cast<double>(payload) * iters / many_total / 1e9;
  state.counters["of_one_tensor"] = one_total / many_total;
  state.counters["threads"] = exec.concurrency();
}

// The HybridOptimizer's step over one bf16 tensor of 2^24 elements (bf16 grads) on the host,
// with the global-norm pass (clipping + loss scaling) and without: the norm reads the grads once
// more (2 of 28 B/element), which is all clipping may cost (of_plain_step ~ 0.93).
void bm_hybrid_clipped(benchmark::State& state) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  const std::int64_t n = std::int64_t{1} << 24;
  Kokkos::View<kopt::bfloat16*, Space::memory_space> param("kopt::perf::param", n);
  Kokkos::View<kopt::bfloat16*, Space::memory_space> grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  const auto make = [&](bool clip) {
    kopt::ParamGroup g;
    g.add("w", kopt::Tensor(param), kopt::Tensor(grad));
    kopt::HybridOptions options;
    if (clip) {
      options.max_grad_norm = 1e9;  // computed and applied, never binding
      options.loss_scaling = kopt::LossScalerOptions{.init_scale = 1.0};
    }
    return kopt::HybridOptimizer({g}, options);
  };
  kopt::HybridOptimizer plain = make(false), clipped = make(true);
  plain.step();
  clipped.step();
  Space exec;
  double plain_total = 0.0, clipped_total = 0.0;
  for (auto _ : state) {
    const double t_plain = seconds(exec, [&] { plain.step(); });
    const double t_clipped = seconds(exec, [&] { clipped.step(); });
    state.SetIterationTime(t_clipped);
    plain_total += t_plain;
    clipped_total += t_clipped;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["Gelem/s"] = static_cast<double>(n) * iters / clipped_total / 1e9;
  state.counters["of_plain_step"] = plain_total / clipped_total;
  state.counters["threads"] = exec.concurrency();
}

template <class ExecSpace>
void register_space(const std::string& space) {
  const auto sizes = [](benchmark::internal::Benchmark* b) {
    for (int e = 20; e <= 26; e += 2) b->Arg(std::int64_t{1} << e);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
  };
  sizes(benchmark::RegisterBenchmark((std::string("adamw_fp32/") + space).c_str(),
                                     bm_fused_step<ExecSpace, float, float>));
  sizes(benchmark::RegisterBenchmark((std::string("adamw_bf16_master/") + space).c_str(),
                                     bm_fused_step<ExecSpace, kopt::bfloat16, kopt::bfloat16>));
  benchmark::RegisterBenchmark((std::string("adamw_fp32_10k_tensors/") + space).c_str(),
                               bm_many_tensors<ExecSpace>)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

void register_offload_benchmarks();  // bench_offload.cpp

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("kopt", kopt::build_info());
  benchmark::AddCustomContext("load_average_at_start", load_average());
  benchmark::AddCustomContext("hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
#ifdef KOKKOS_ENABLE_SERIAL
  register_space<Kokkos::Serial>("Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  register_space<Kokkos::OpenMP>("OpenMP");
#endif
#ifdef KOKKOS_ENABLE_CUDA
  register_space<Kokkos::Cuda>("Cuda");
#endif
  benchmark::RegisterBenchmark("hybrid_bf16_clip_and_loss_scale/host", bm_hybrid_clipped)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  register_offload_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
