// Every algorithm beside Adam on every enabled space: SGD (plain, momentum, Nesterov), Lion
// and Adagrad, fp32 and bf16 params with fp32 masters, each timed beside the ceiling of its
// own access pattern (the state arrays it keeps; perf/ceiling.hpp), alternating inside each
// iteration so machine noise hits both.
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/kopt.hpp>

#include "ceiling.hpp"
#include "common.hpp"

namespace kopt_perf {
namespace {

// One tensor of n elements: kopt's step of `config` vs the ceiling of the same pattern on
// its own state. Arrays: the state arrays the config keeps (config.state_arrays()).
template <class ExecSpace, class Config, unsigned Arrays, class ParamT>
void bm_algorithm(benchmark::State& state, Config config) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  if (config.state_arrays() != Arrays) {
    state.SkipWithError("the config keeps other state arrays than the pattern");
    return;
  }
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedOptimizer<ExecSpace, typename Config::Policy> opt(exec, config, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();  // allocates and first-touches the state, in parallel like every step
  const auto pattern =
      pattern_of<ParamT, ParamT, Arrays>(param.data(), grad.data(), opt.state("w"));
  time_beside_ceiling(state, exec, pattern, n, update_bytes<ParamT, ParamT>(Arrays),
                      [&] { opt.step(); });
}

template <class S, class Config, unsigned Arrays>
void add_both(const std::string& name, const Config& config, const std::string& on,
              const std::vector<std::int64_t>& sizes) {
  add(
      name + "_fp32" + on,
      [config](benchmark::State& s) { bm_algorithm<S, Config, Arrays, float>(s, config); }, sizes);
  add(
      name + "_bf16_master" + on,
      [config](benchmark::State& s) { bm_algorithm<S, Config, Arrays, kopt::bfloat16>(s, config); },
      sizes);
}

}  // namespace

void register_algorithm_benchmarks() {
  for_each_space([&](auto tag) {
    using S = typename decltype(tag)::type;
    const std::string on = "/" + space_name<S>();
    if (!full_suite() && is_serial<S>()) return;
    const auto sizes = pow2_sizes({20, 26}, {16, 18, 20, 22, 24, 26});
    add_both<S, kopt::SgdConfig, 0u>("sgd", kopt::SgdConfig{.lr = 1e-2}, on, sizes);
    add_both<S, kopt::SgdConfig, 1u>("sgd_momentum", kopt::SgdConfig{.lr = 1e-2, .momentum = 0.9},
                                     on, sizes);
    add_both<S, kopt::SgdConfig, 1u>(
        "sgd_nesterov", kopt::SgdConfig{.lr = 1e-2, .momentum = 0.9, .nesterov = true}, on, sizes);
    add_both<S, kopt::LionConfig, 1u>("lion", kopt::LionConfig{.weight_decay = 0.1}, on, sizes);
    add_both<S, kopt::AdagradConfig, 1u>("adagrad", kopt::AdagradConfig{}, on, sizes);
  });
}

}  // namespace kopt_perf
