// The ceilings and the fused update on every enabled space. STREAM copy and triad first, then
// each update variant (fp32; bf16 and fp16 params with fp32 masters; bf16 params with
// remainder masters, with fp32 or bf16 state, or without masters beside bf16 state; fp32
// with amsgrad) at sizes 2^16..2^26, every
// row timed beside the ceiling of its own access pattern and (host spaces, fp32 masters) the
// plain OpenMP loop of the same update: they alternate inside each iteration so machine noise
// hits all.
#include <kopt/kopt.hpp>

#include "ceiling.hpp"
#include "common.hpp"

namespace kopt_perf {
namespace {

// STREAM copy (a = b) or triad (a = b + s c) over n floats, bytes counted as read + written.
template <class ExecSpace, bool Triad>
void bm_stream(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<float*, Mem> a("kopt::perf::a", n), b("kopt::perf::b", n), c("kopt::perf::c", n);
  fill_random(a, 1);
  fill_random(b, 2);
  fill_random(c, 3);
  const auto run = [&] {
    if constexpr (Triad) {
      run_pattern(exec, TriadPattern{a.data(), b.data(), c.data()}, n);
    } else {
      run_pattern(exec, CopyPattern{a.data(), b.data()}, n);
    }
  };
  run();
  double total = 0.0;
  for (auto _ : state) {
    const double t = seconds(exec, run);
    state.SetIterationTime(t);
    total += t;
  }
  report(state, static_cast<double>(n), Triad ? 12.0 : 8.0, total, 0.0, exec.concurrency());
}

// One tensor of n elements: kopt's step vs the ceiling of the same pattern on its own state.
template <class ExecSpace, class ParamT, class GradT, bool Amsgrad>
void bm_update(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n);
  Kokkos::View<GradT*, Mem> grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedAdam<ExecSpace> opt(exec, kopt::AdamConfig{.amsgrad = Amsgrad}, "kopt::perf");
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();  // allocates and first-touches the state, in parallel like every step
  const auto s = opt.state("w");
  const auto pattern =
      pattern_of<ParamT, GradT, adam_arrays(Amsgrad)>(param.data(), grad.data(), s);
  run_pattern(exec, pattern, n);
  // The plain loop, on the host only (its arrays are host memory).
  std::unique_ptr<plain::AdamW> loop;
  if constexpr (kopt::Impl::runs_on_host<ExecSpace>) {
    loop = std::make_unique<plain::AdamW>(elem_of<ParamT>(), elem_of<GradT>(), Amsgrad, n,
                                          exec.concurrency());
    loop->step(grad.data());
  }
  double kopt_total = 0.0, ceiling_total = 0.0, plain_total = 0.0;
  for (auto _ : state) {
    ceiling_total += ceiling_seconds(exec, pattern, n);
    if (loop) plain_total += seconds(exec, [&] { loop->step(grad.data()); });
    const double t = seconds(exec, [&] { opt.step(); });
    state.SetIterationTime(t);
    kopt_total += t;
  }
  report(state, static_cast<double>(n), update_bytes_per_element<ParamT, GradT, Amsgrad>(),
         kopt_total, ceiling_total, exec.concurrency());
  if (loop) report_plain(state, plain_total, kopt_total);
}

// One tensor of n bf16 elements with its state stored in fewer bytes, beside the ceiling of
// its own pattern: masters kept as remainders (Master = MasterStorage::remainder) beside fp32
// state arrays (26 B/element against the 28 of an fp32 master), bf16 or f16 ones (S0 = S1 =
// bfloat16 or float16: 18 B), q8 ones (S0 = S1 = std::uint8_t: 14.06 B) or bf16 exp_avg
// beside fp32 exp_avg_sq (S0 = bfloat16, S1 = float: 22 B); or no masters (MasterStorage::none,
// rounded to nearest or stochastically) beside bf16 arrays (14 B); StateRounding: how the
// arrays are rounded. (S = std::uint8_t: q8 codes, 260 bytes per block of 256: 10.06 B with
// remainders; beside fp32 masters, MasterStorage::f32, 16.06 B.)
template <class S>
constexpr kopt::DType state_dtype() {
  return std::is_same_v<S, float>            ? kopt::DType::f32
         : std::is_same_v<S, kopt::bfloat16> ? kopt::DType::bf16
         : std::is_same_v<S, std::uint8_t>   ? kopt::DType::q8
                                             : kopt::DType::f16;
}
// Bytes an element of a state array of S takes.
template <class S>
constexpr double stored_bytes() {
  return std::is_same_v<S, std::uint8_t>
             ? static_cast<double>(kopt::Impl::q8_block_bytes) / kopt::Impl::q8_block
             : static_cast<double>(sizeof(S));
}

template <class ExecSpace, kopt::MasterStorage Master, class S0, class S1 = S0,
          kopt::Rounding Rounding = kopt::Rounding::nearest,
          kopt::Rounding StateRounding = kopt::Rounding::nearest>
void bm_update_storage(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  using kopt::bfloat16;
  const auto n = static_cast<std::int64_t>(state.range(0));
  ExecSpace exec;
  Kokkos::View<bfloat16*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  constexpr bool stochastic =
      Rounding == kopt::Rounding::stochastic || StateRounding == kopt::Rounding::stochastic;
  kopt::StateStorage storage{.master = Master,
                             .arrays = state_dtype<S1>(),
                             .rounding = Rounding,
                             .seed = stochastic ? 1u : 0u,
                             .state_rounding = StateRounding};
  storage.array_dtypes[0] = state_dtype<S0>();
  kopt::FusedOptimizer<ExecSpace, kopt::Impl::AdamPolicy> opt(exec, kopt::AdamConfig{},
                                                              "kopt::perf", storage);
  opt.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  opt.step();  // allocates and first-touches the state, in parallel like every step
  const auto s = opt.state("w");
  const auto at = [&](auto type, std::size_t k) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bfloat16>)
      return const_cast<bfloat16*>(s.bf16_arrays[k].data());
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      return const_cast<std::uint8_t*>(s.q8_arrays[k].data());
    else if constexpr (std::is_same_v<T, kopt::float16>)
      return const_cast<kopt::float16*>(s.f16_arrays[k].data());
    else
      return const_cast<float*>(s.arrays[k].data());
  };
  constexpr unsigned arrays = adam_arrays(false);
  // grad read, m and v read and written, and the param side (remainder: param and remainder
  // read and written, 8 B; none: the param read and written, 4 B).
  constexpr double state_bytes = sizeof(bfloat16) + 2.0 * (stored_bytes<S0>() + stored_bytes<S1>());
  const auto run = [&] { opt.step(); };
  if constexpr (Master == kopt::MasterStorage::remainder) {
    const UpdatePattern<bfloat16, bfloat16, arrays, std::uint16_t, S0, S1> pattern{
        param.data(), grad.data(), const_cast<std::uint16_t*>(s.remainder.data()),
        at(S0{}, 0),  at(S1{}, 1), nullptr};
    time_beside_ceiling(state, exec, pattern, n, state_bytes + 8.0, run);
  } else if constexpr (Master == kopt::MasterStorage::f32) {
    // The master read and written, the param written.
    const UpdatePattern<bfloat16, bfloat16, arrays, float, S0, S1> pattern{
        param.data(), grad.data(), const_cast<float*>(s.master.data()),
        at(S0{}, 0),  at(S1{}, 1), nullptr};
    time_beside_ceiling(state, exec, pattern, n, state_bytes + 10.0, run);
  } else {
    const UpdatePattern<bfloat16, bfloat16, arrays, kopt::Impl::RoundToNearest, S0, S1> pattern{
        param.data(), grad.data(), nullptr, at(S0{}, 0), at(S1{}, 1), nullptr};
    time_beside_ceiling(state, exec, pattern, n, state_bytes + 4.0, run);
  }
}

}  // namespace

void register_update_benchmarks() {
  using kopt::bfloat16;
  using kopt::float16;
  const std::int64_t largest = scaled(std::int64_t{1} << 26);
  for_each_space([&](auto tag) {
    using S = typename decltype(tag)::type;
    const std::string on = "/" + space_name<S>();
    add("stream_copy" + on, bm_stream<S, false>, {largest});
    add("stream_triad" + on, bm_stream<S, true>, {largest});
  });
  for_each_space([&](auto tag) {
    using S = typename decltype(tag)::type;
    const std::string on = "/" + space_name<S>();
    const bool few = !full_suite() && is_serial<S>();
    const auto sizes =
        few ? pow2_sizes({24}, {})
            : pow2_sizes({16, 18, 20, 22, 24, 26}, {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26});
    add("adamw_fp32" + on, bm_update<S, float, float, false>, sizes);
    add("adamw_bf16_master" + on, bm_update<S, bfloat16, bfloat16, false>, sizes);
    using kopt::MasterStorage;
    add("adamw_bf16_remainder" + on, bm_update_storage<S, MasterStorage::remainder, float>, sizes);
    add("adamw_bf16_remainder_bf16_state" + on,
        bm_update_storage<S, MasterStorage::remainder, bfloat16>, sizes);
    add("adamw_bf16_remainder_bf16_state_sr" + on,  // the arrays rounded stochastically
        bm_update_storage<S, MasterStorage::remainder, bfloat16, bfloat16, kopt::Rounding::nearest,
                          kopt::Rounding::stochastic>,
        sizes);
    add("adamw_bf16_remainder_bf16_m_f32_v" + on,
        bm_update_storage<S, MasterStorage::remainder, bfloat16, float>, sizes);
    add("adamw_bf16_remainder_f16_state" + on,
        bm_update_storage<S, MasterStorage::remainder, float16>, sizes);
    add("adamw_bf16_remainder_q8_state" + on,
        bm_update_storage<S, MasterStorage::remainder, std::uint8_t>, sizes);
    add("adamw_bf16_remainder_q8_state_sr" + on,  // the codes rounded stochastically
        bm_update_storage<S, MasterStorage::remainder, std::uint8_t, std::uint8_t,
                          kopt::Rounding::nearest, kopt::Rounding::stochastic>,
        sizes);
    add("adamw_bf16_remainder_q8_m_f32_v" + on,
        bm_update_storage<S, MasterStorage::remainder, std::uint8_t, float>, sizes);
    add("adamw_bf16_master_q8_state" + on,  // fp32 masters beside q8 m and v (16.06 B)
        bm_update_storage<S, MasterStorage::f32, std::uint8_t>, sizes);
    add("adamw_bf16_no_master_bf16_state" + on, bm_update_storage<S, MasterStorage::none, bfloat16>,
        sizes);
    add("adamw_bf16_stochastic_bf16_state" + on,
        bm_update_storage<S, MasterStorage::none, bfloat16, bfloat16, kopt::Rounding::stochastic>,
        sizes);
    if (few) return;
    add("adamw_fp16_master" + on, bm_update<S, float16, float16, false>, sizes);
    add("adamw_fp32_amsgrad" + on, bm_update<S, float, float, true>, sizes);
  });
}

}  // namespace kopt_perf
