// Every algorithm beside Adam on every enabled space: SGD (plain, momentum, Nesterov), Lion,
// Adagrad, LAMB and Adafactor, fp32 and bf16 params with fp32 masters, each timed beside the
// ceiling of its own access pattern (the state arrays it keeps; perf/ceiling.hpp; LAMB: a
// read of every stream, then the update's; Adafactor: the least traffic its step needs),
// alternating inside each iteration so machine noise hits both; Muon beside the gemms of its
// Newton-Schulz iteration alone.
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

/// A pass that only reads: the grad and N fp32 streams, summed in 16 float lanes per chunk
/// (LAMB's measure pass: master, m, v; Adafactor's reads: its master, or the grad alone).
template <class ExecSpace, class GradT, int N>
struct ReadStreamsFunctor {
  const GradT* grad;
  const float* streams[N > 0 ? N : 1];  // a plain array: device code reads it
  Kokkos::View<float*, typename ExecSpace::memory_space> partials;
  std::int64_t n;
  static constexpr std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  KOKKOS_INLINE_FUNCTION float at(std::int64_t i) const {
    float x = raw_value(grad[i]);
    for (int k = 0; k < N; ++k) x += streams[k][i];
    return x;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const std::int64_t begin = chunk * size, end = begin + size < n ? begin + size : n;
    float lane[16] = {};
    std::int64_t i = begin;
    for (; i + 16 <= end; i += 16)
      for (int k = 0; k < 16; ++k) lane[k] += at(i + k);
    float sum = 0.0f;
    for (; i < end; ++i) sum += at(i);
    for (int k = 0; k < 16; ++k) sum += lane[k];
    partials(chunk) = sum;
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t begin = team.league_rank() * size, end = begin + size < n ? begin + size : n;
    float sum = 0.0f;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, begin, end),
        [&](const std::int64_t i, float& acc) { acc += at(i); }, sum);
    if (team.team_rank() == 0) partials(team.league_rank()) = sum;
  }
};

/// LAMB on one tensor beside its two passes' ceiling: the read of every stream (its master
/// or fp32 param, grad, m, v), then Adam's update pattern (the same state).
template <class ExecSpace, class ParamT>
void bm_lamb(benchmark::State& state, kopt::LambConfig config) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedOptimizer<ExecSpace, kopt::Impl::LambPolicy> opt(exec, config, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();
  const auto s = opt.state("w");
  const auto pattern = pattern_of<ParamT, ParamT, 3u>(param.data(), grad.data(), s);
  const float* master = std::is_same_v<ParamT, float> ? reinterpret_cast<const float*>(param.data())
                                                      : s.master.data();
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  const ReadStreamsFunctor<ExecSpace, ParamT, 3> read{
      grad.data(),
      {master, s.arrays[0].data(), s.arrays[1].data()},
      Kokkos::View<float*, Mem>("kopt::perf::partials", (n + size - 1) / size),
      n};
  const auto run_read = [&] {
    kopt::Impl::launch_chunks(exec, "kopt::perf::read_state", read.partials.extent(0), read);
  };
  const double read_bytes = 12.0 + sizeof(ParamT);  // master or param, grad, m, v
  double kopt_total = 0.0, ceiling_total = 0.0;
  for (auto _ : state) {
    ceiling_total += seconds(exec, run_read) + ceiling_seconds(exec, pattern, n);
    const double t = seconds(exec, [&] { opt.step(); });
    state.SetIterationTime(t);
    kopt_total += t;
  }
  report(state, static_cast<double>(n), read_bytes + update_bytes<ParamT, ParamT>(3u), kopt_total,
         ceiling_total, exec.concurrency());
}

/// Adafactor on one n-element matrix (the most nearly square power-of-two shape) beside the
/// ceiling of the least traffic its step needs: a read of the param (its master) and grad
/// (||p||, the row and column sums of g^2), a read of the grad (||u||, for the clipping),
/// and SGD's update pattern (read param and grad, write the param). kopt's step moves these
/// bytes, in four passes: the read of the param (kopt/impl/whole_param_norm.hpp) is apart
/// from the grad's for the statistics (README, Adafactor).
template <class ExecSpace, class ParamT>
void bm_adafactor(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  std::int64_t rows = 1;
  while (rows * rows * 4 <= n) rows *= 2;
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedOptimizer<ExecSpace, kopt::Impl::AdafactorPolicy> opt(exec, kopt::AdafactorConfig{},
                                                                   "kopt::perf");
  opt.add("w", kopt::Tensor(param).matrix(rows, n / rows), kopt::Tensor(grad));
  opt.step();
  const auto s = opt.state("w");
  const auto pattern = pattern_of<ParamT, ParamT, 0u>(param.data(), grad.data(), s);
  const float* master = std::is_same_v<ParamT, float> ? reinterpret_cast<const float*>(param.data())
                                                      : s.master.data();
  const std::int64_t size = kopt::Impl::chunk_size<ExecSpace>;
  const Kokkos::View<float*, Mem> partials("kopt::perf::partials", (n + size - 1) / size);
  const ReadStreamsFunctor<ExecSpace, ParamT, 1> both{grad.data(), {master}, partials, n};
  const ReadStreamsFunctor<ExecSpace, ParamT, 0> grads{grad.data(), {}, partials, n};
  const auto reads = [&] {
    const auto chunks = static_cast<std::int64_t>(partials.extent(0));
    kopt::Impl::launch_chunks(exec, "kopt::perf::read_both", chunks, both);
    kopt::Impl::launch_chunks(exec, "kopt::perf::read_grads", chunks, grads);
  };
  const double read_bytes = 4.0 + 2.0 * sizeof(ParamT);  // master or param, grad; grad
  double kopt_total = 0.0, ceiling_total = 0.0;
  for (auto _ : state) {
    ceiling_total += seconds(exec, reads) + ceiling_seconds(exec, pattern, n);
    const double t = seconds(exec, [&] { opt.step(); });
    state.SetIterationTime(t);
    kopt_total += t;
  }
  report(state, static_cast<double>(n), read_bytes + update_bytes<ParamT, ParamT>(0u), kopt_total,
         ceiling_total, exec.concurrency());
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["state_B/elem"] =
      static_cast<double>(opt.state_bytes() - (std::is_same_v<ParamT, float> ? 0 : 4 * n)) /
      static_cast<double>(n);
  state.counters["workspace_B/elem"] =
      static_cast<double>(opt.workspace_bytes()) / static_cast<double>(n);
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

/// Muon on one rows x cols fp32 matrix beside the same run's gemms alone: the 3 ns_steps
/// KokkosBlas::gemm calls of its Newton-Schulz iteration on matrices of its shapes, with
/// nothing around them. of_ceiling = gemm time / step time: the share of the step that is
/// gemm (the rest: the two elementwise passes, the norm, the copies between the products).
template <class ExecSpace>
void bm_muon(benchmark::State& state, std::int64_t rows, std::int64_t cols) {
  using Mem = typename ExecSpace::memory_space;
  using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Mem>;
  ExecSpace exec;
  Matrix param("kopt::perf::param", rows, cols), grad("kopt::perf::grad", rows, cols);
  fill_random(Kokkos::View<float*, Mem>(param.data(), param.span()), 1);
  fill_random(Kokkos::View<float*, Mem>(grad.data(), grad.span()), 2);
  const kopt::MuonConfig config{.lr = 2e-2};
  kopt::FusedOptimizer<ExecSpace, kopt::Impl::MuonPolicy> opt(exec, config, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();
  const std::int64_t m = std::min(rows, cols);
  Matrix x("kopt::perf::x", m, std::max(rows, cols)), y("kopt::perf::y", m, std::max(rows, cols));
  Matrix a("kopt::perf::a", m, m), b("kopt::perf::b", m, m);
  fill_random(Kokkos::View<float*, Mem>(x.data(), x.span()), 3);
  const auto gemms = [&] {
    for (int it = 0; it < static_cast<int>(config.ns_steps); ++it) {
      KokkosBlas::gemm("N", "T", 1.0f, x, x, 0.0f, a);
      KokkosBlas::gemm("N", "N", 2.0f, a, a, -4.0f, b);
      KokkosBlas::gemm("N", "N", 1.0f, b, x, 3.0f, y);
    }
  };
  double step_total = 0.0, gemm_total = 0.0;
  for (auto _ : state) {
    gemm_total += seconds(exec, gemms);
    const double t = seconds(exec, [&] { opt.step(); });
    state.SetIterationTime(t);
    step_total += t;
  }
  const double iters = static_cast<double>(state.iterations());
  const double flops =
      config.ns_steps * 2.0 * (2.0 * m * m * std::max(rows, cols) + 1.0 * m * m * m);
  state.counters["Gelem/s"] = static_cast<double>(rows * cols) * iters / step_total / 1e9;
  state.counters["GFLOP/s"] = flops * iters / step_total / 1e9;
  state.counters["gemm_GFLOP/s"] = flops * iters / gemm_total / 1e9;
  state.counters["of_ceiling"] = gemm_total / step_total;
  state.counters["threads"] = exec.concurrency();
  const auto elements = static_cast<double>(rows * cols);
  state.counters["state_B/elem"] = static_cast<double>(opt.state_bytes()) / elements;
  state.counters["workspace_B/elem"] = static_cast<double>(opt.workspace_bytes()) / elements;
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
    add(
        "lamb_fp32" + on, [](benchmark::State& s) { bm_lamb<S, float>(s, kopt::LambConfig{}); },
        sizes);
    add(
        "lamb_bf16_master" + on,
        [](benchmark::State& s) { bm_lamb<S, kopt::bfloat16>(s, kopt::LambConfig{}); }, sizes);
    add(
        "adafactor_fp32" + on, [](benchmark::State& s) { bm_adafactor<S, float>(s); }, sizes);
    add(
        "adafactor_bf16_master" + on,
        [](benchmark::State& s) { bm_adafactor<S, kopt::bfloat16>(s); }, sizes);
    // (No structured bindings: Clang 16 cannot capture them with OpenMP on.)
    for (const auto& shape :
         std::vector<std::pair<std::int64_t, std::int64_t>>{{1024, 1024}, {4096, 1024}}) {
      const std::int64_t rows = shape.first, cols = shape.second;
      add("muon_" + std::to_string(rows) + "x" + std::to_string(cols) + on,
          [rows, cols](benchmark::State& s) { bm_muon<S>(s, rows, cols); });
    }
  });
}

}  // namespace kopt_perf
