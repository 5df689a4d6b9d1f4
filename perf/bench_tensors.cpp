// The same total (2^24 or 2^26 elements) split into 10, 1,000 and 100,000 tensors of mixed
// sizes, vs one tensor of that total and the plain loop over it: the chunk table makes one
// launch of the many cost what one launch of the one does (of_one_tensor ~ 1). Each tensor starts
// on a 64-byte boundary, as framework allocators and flat parameter buffers place them. Sizes are
// log-uniform over a 64x range.
#include <cmath>
#include <cstdio>
#include <kopt/kopt.hpp>
#include <random>

#include "ceiling.hpp"
#include "common.hpp"

namespace kopt_perf {
namespace {

struct Split {
  std::vector<std::int64_t> sizes, offsets;
  std::int64_t payload = 0;  // elements in tensors
  std::int64_t extent = 0;   // elements including the padding to 16-element boundaries
};

Split mixed_split(std::int64_t total, int tensors) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(0.0, std::log(64.0));
  std::vector<double> weight(tensors);
  double sum = 0.0;
  for (auto& w : weight) sum += (w = std::exp(exponent(rng)));
  Split split;
  for (const double w : weight) {
    const auto n = std::max<std::int64_t>(1, std::llround(static_cast<double>(total) * w / sum));
    split.sizes.push_back(n);
    split.offsets.push_back(split.extent);
    split.payload += n;
    split.extent += (n + 15) / 16 * 16;
  }
  return split;
}

template <class ExecSpace, class ParamT>
void bm_split(benchmark::State& state) {
  using Mem = typename ExecSpace::memory_space;
  const Split split = mixed_split(scaled(state.range(1)), static_cast<int>(state.range(0)));
  ExecSpace exec;
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", split.extent);
  Kokkos::View<ParamT*, Mem> grad("kopt::perf::grad", split.extent);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::FusedAdam<ExecSpace> many(exec, kopt::AdamConfig{}, "kopt::perf::many");
  kopt::FusedAdam<ExecSpace> one(exec, kopt::AdamConfig{}, "kopt::perf::one");
  for (std::size_t t = 0; t < split.sizes.size(); ++t) {
    const auto range = std::make_pair(split.offsets[t], split.offsets[t] + split.sizes[t]);
    char name[32];
    std::snprintf(name, sizeof name, "t%zu", t);
    many.add(name, kopt::Tensor(Kokkos::subview(param, range)),
             kopt::Tensor(Kokkos::subview(grad, range)));
  }
  const auto all = std::make_pair(std::int64_t{0}, split.payload);
  one.add("all", kopt::Tensor(Kokkos::subview(param, all)),
          kopt::Tensor(Kokkos::subview(grad, all)));
  many.step();
  one.step();
  const auto s = one.state("all");
  const auto pattern = pattern_of<ParamT, ParamT, adam_arrays(false)>(param.data(), grad.data(), s);
  // The plain loop over the same elements as one array (host spaces).
  std::unique_ptr<plain::AdamW> loop;
  if constexpr (kopt::Impl::runs_on_host<ExecSpace>) {
    loop = std::make_unique<plain::AdamW>(elem_of<ParamT>(), elem_of<ParamT>(), false,
                                          split.payload, exec.concurrency());
    loop->step(grad.data());
  }
  double many_total = 0.0, one_total = 0.0, ceiling_total = 0.0, plain_total = 0.0;
  for (auto _ : state) {
    ceiling_total += ceiling_seconds(exec, pattern, split.payload);
    if (loop) plain_total += seconds(exec, [&] { loop->step(grad.data()); });
    one_total += seconds(exec, [&] { one.step(); });
    const double t = seconds(exec, [&] { many.step(); });
    state.SetIterationTime(t);
    many_total += t;
  }
  report(state, static_cast<double>(split.payload),
         update_bytes_per_element<ParamT, ParamT, false>(), many_total, ceiling_total,
         exec.concurrency());
  state.counters["of_one_tensor"] = one_total / many_total;
  if (loop) report_plain(state, plain_total, many_total);
  state.counters["elements"] = static_cast<double>(split.payload);
}

}  // namespace

void register_tensor_split_benchmarks() {
  for_each_space([](auto tag) {
    using S = typename decltype(tag)::type;
    if (!full_suite() && is_serial<S>()) return;
    const std::string on = "/" + space_name<S>();
    // (tensors, total elements): 1,000 tensors at both sizes the peers run, 10 and 100,000
    // at the larger.
    const std::vector<std::vector<std::int64_t>> splits = {{10, std::int64_t{1} << 26},
                                                           {1000, std::int64_t{1} << 24},
                                                           {1000, std::int64_t{1} << 26},
                                                           {100000, std::int64_t{1} << 26}};
    auto* fp32 = add("adamw_fp32_split" + on, bm_split<S, float>);
    auto* bf16 = add("adamw_bf16_master_split" + on, bm_split<S, kopt::bfloat16>);
    for (const auto& args : splits) {
      fp32->Args(args);
      bf16->Args(args);
    }
  });
}

}  // namespace kopt_perf
