// The bookkeeping of many params, as a mixture-of-experts model has them: N tiny params in
// N / 1000 groups through ParamGroup::add, HybridOptimizer construction, the first step,
// save() and load() into a fresh optimizer. Each phase is timed once per iteration;
// `us_per_param` of each should stay flat from 10,000 to 300,000 params (linear cost).
#include <chrono>
#include <filesystem>
#include <kopt/kopt.hpp>
#include <random>

#include "common.hpp"

namespace kopt_perf {
namespace {

constexpr std::int64_t kElements = 8;  // per param

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bm_many_params(benchmark::State& state) {
  using Host = Kokkos::HostSpace;
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t groups = std::max<std::size_t>(1, n / 1000);
  Kokkos::View<float*, Host> param("kopt::perf::param", n * kElements);
  Kokkos::View<float*, Host> grad("kopt::perf::grad", n * kElements);
  fill_random(param, 1);
  fill_random(grad, 2);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kopt-perf-many-" + std::to_string(std::random_device{}()));
  std::vector<std::string> names(n);
  for (std::size_t i = 0; i < n; ++i) names[i] = "layers." + std::to_string(i) + ".weight";
  const auto make_groups = [&] {
    std::vector<kopt::ParamGroup> gs(groups);
    for (std::size_t i = 0; i < n; ++i)
      gs[i % groups].add(names[i], kopt::Tensor::from(param.data() + i * kElements, kElements),
                         kopt::Tensor::from(grad.data() + i * kElements, kElements));
    return gs;
  };
  double add = 0, construct = 0, first_step = 0, save = 0, load = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<kopt::ParamGroup> gs = make_groups();
    add += since(t0);
    t0 = std::chrono::steady_clock::now();
    kopt::HybridOptimizer opt(std::move(gs));
    construct += since(t0);
    t0 = std::chrono::steady_clock::now();
    opt.step();
    Kokkos::fence();
    first_step += since(t0);
    t0 = std::chrono::steady_clock::now();
    opt.save(dir.string());
    save += since(t0);
    kopt::HybridOptimizer fresh(make_groups());
    t0 = std::chrono::steady_clock::now();
    fresh.load(dir.string());
    load += since(t0);
    state.SetIterationTime(add + construct + first_step + save + load);
  }
  std::filesystem::remove_all(dir);
  const double iters = static_cast<double>(state.iterations());
  const double us = 1e6 / (iters * static_cast<double>(n));
  state.counters["params"] = static_cast<double>(n);
  state.counters["groups"] = static_cast<double>(groups);
  for (const auto& [name, total] :
       {std::pair{"add", add}, std::pair{"construct", construct},
        std::pair{"first_step", first_step}, std::pair{"save", save}, std::pair{"load", load}}) {
    state.counters[std::string(name) + "_s"] = total / iters;
    state.counters[std::string(name) + "_us_per_param"] = total * us;
  }
}

}  // namespace

void register_many_params_benchmarks() {
  add("many_params/host", bm_many_params, {10000, 100000, 300000})->Iterations(1);
}

}  // namespace kopt_perf
