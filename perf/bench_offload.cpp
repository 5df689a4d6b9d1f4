// The offload pipeline (StatePlacement::host): params and grads in the device's memory, state
// on the host. Per iteration the same engine runs three ways on the same data, interleaved
// so machine noise hits all three: the full pipelined step (total), its copies alone (copy:
// grads device->host, params host->device, same chunks and queues) and its host update alone
// (update). overlap = total / max(copy, update): 1.0 is perfect overlap, 2.0 none;
// of_serial = total / (copy + update). host_state_B and copy_B: bytes per element of host
// state and of copies per step, by storage form (remainders: 2 B of host state for an fp32
// master's 4, and the param's 2 B towards the host each step).
// On a host-only build the "device" is host memory and the copy queues are worker threads.
#include <kopt/impl/offload_engine.hpp>
#include <kopt/kopt.hpp>

#include "common.hpp"

namespace kopt_perf {
namespace {

/// The storage forms the rows measure: fp32 masters and moments (the default), and bf16
/// params' 6-byte form, remainders with bf16 moments.
enum class Form { fp32_state, remainder_bf16_state };

kopt::StateStorage storage_of(Form form) {
  if (form == Form::fp32_state) return {};
  return {.master = kopt::MasterStorage::remainder, .arrays = kopt::DType::bf16};
}

template <class DeviceExec, class StateMem, class ParamT, class GradT, Form form = Form::fp32_state>
void bm_offload(benchmark::State& state) {
  using Mem = typename DeviceExec::memory_space;
  using Engine = kopt::Impl::OffloadEngine<DeviceExec, StateMem, kopt::Impl::AdamPolicy>;
  const auto n = static_cast<std::int64_t>(state.range(0));
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n);
  Kokkos::View<GradT*, Mem> grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::OffloadOptions options;  // default chunks: 2^20 elements, 3 staging buffers
  const kopt::StateStorage storage = storage_of(form);
  auto base = kopt::Impl::make_offload_engine(
      kopt::memory_space_of<Mem>(), kopt::dtype_of<ParamT>(), kopt::AdamConfig{}, options, storage);
  auto& engine = dynamic_cast<Engine&>(*base);
  engine.add_group(kopt::AdamConfig{});
  engine.add("w", kopt::Tensor(param), kopt::Tensor(grad), 0);
  engine.step(1.0);  // allocates and first-touches the host state
  const auto timed = [&](kopt::Impl::PipelineMode mode) {
    engine.set_mode(mode);
    engine.step(1.0);
    return engine.last_times().total;
  };
  double total = 0, copy = 0, update = 0, update_in_pipeline = 0;
  double wait_grads = 0, wait_staging = 0, wait_last = 0;
  for (auto _ : state) {
    const double t_copy = timed(kopt::Impl::PipelineMode::copies_only);
    const double t_update = timed(kopt::Impl::PipelineMode::update_only);
    const double t_total = timed(kopt::Impl::PipelineMode::full);
    update_in_pipeline += engine.last_times().update;
    wait_grads += engine.last_times().wait_grads;
    wait_staging += engine.last_times().wait_staging;
    wait_last += engine.last_times().wait_last;
    state.SetIterationTime(t_total);
    total += t_total;
    copy += t_copy;
    update += t_update;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["Gelem/s"] = static_cast<double>(n) * iters / total / 1e9;
  state.counters["total_ms"] = 1e3 * total / iters;
  state.counters["copy_ms"] = 1e3 * copy / iters;
  state.counters["update_ms"] = 1e3 * update / iters;
  state.counters["update_in_pipe_ms"] = 1e3 * update_in_pipeline / iters;
  state.counters["wait_grads_ms"] = 1e3 * wait_grads / iters;
  state.counters["wait_staging_ms"] = 1e3 * wait_staging / iters;
  state.counters["wait_last_ms"] = 1e3 * wait_last / iters;
  // Grads in and params out; a param without an fp32 master comes in with its grad too.
  const double copy_bytes = static_cast<double>(
      sizeof(GradT) + sizeof(ParamT) * (storage.master == kopt::MasterStorage::f32 ? 1 : 2));
  state.counters["copy_B"] = copy_bytes;
  state.counters["host_state_B"] =
      static_cast<double>(engine.state_bytes()) / static_cast<double>(n);
  state.counters["copy_GB/s"] = copy_bytes * static_cast<double>(n) * iters / copy / 1e9;
  state.counters["overlap"] = total / std::max(copy, update);
  // Where copies and update share one resource (host-only: the cores and memory bandwidth),
  // the step cannot beat their sum by much; 1.0 = no gain from the pipeline, 0.5 = perfect.
  state.counters["of_serial"] = total / (copy + update);
  state.counters["threads"] = Kokkos::DefaultHostExecutionSpace().concurrency();
}

// 100,000 tiny params (state.range(0) of them, 64 elements each) offloaded, against one
// param of the same size, in the same iterations: one_ms, tiny_ms and tiny_over_one, the cost
// of tiny params (about 1 is the goal: their copies go as one batch per chunk and direction);
// and tiny_each_ms, the same tiny params with every copy on its own (batch_copies_below = 0),
// which is what batching saves. bf16 params and grads, AdamW.
template <class DeviceExec, class StateMem>
void bm_offload_tiny(benchmark::State& state) {
  using Mem = typename DeviceExec::memory_space;
  constexpr std::int64_t per_param = 64;
  const auto count = static_cast<std::int64_t>(state.range(0));
  const std::int64_t n = count * per_param;
  Kokkos::View<kopt::bfloat16*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  const auto engine = [&](std::size_t batch_below, std::int64_t params) {
    kopt::OffloadOptions options;
    options.batch_copies_below = batch_below;
    auto e = kopt::Impl::make_offload_engine(kopt::memory_space_of<Mem>(), kopt::DType::bf16,
                                             kopt::AdamConfig{}, options);
    e->add_group(kopt::AdamConfig{.weight_decay = 0.01});
    const std::int64_t each = n / params;
    for (std::int64_t k = 0; k < params; ++k) {
      const auto piece = std::make_pair(k * each, (k + 1) * each);
      e->add("p" + std::to_string(k), kopt::Tensor(Kokkos::subview(param, piece)),
             kopt::Tensor(Kokkos::subview(grad, piece)), 0);
    }
    e->step(1.0);  // allocates and first-touches the host state
    return e;
  };
  const auto one = engine(kopt::OffloadOptions{}.batch_copies_below, 1);
  const auto tiny = engine(kopt::OffloadOptions{}.batch_copies_below, count);
  const auto each = engine(0, count);
  const auto timed = [](kopt::Impl::Engine& e) {
    const auto t0 = std::chrono::steady_clock::now();
    e.step(1.0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double t_one = 0, t_tiny = 0, t_each = 0;
  for (auto _ : state) {
    const double a = timed(*one), b = timed(*tiny), c = timed(*each);
    state.SetIterationTime(b);
    t_one += a;
    t_tiny += b;
    t_each += c;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["elements"] = static_cast<double>(n);
  state.counters["Gelem/s"] = static_cast<double>(n) * iters / t_tiny / 1e9;
  state.counters["one_ms"] = 1e3 * t_one / iters;
  state.counters["tiny_ms"] = 1e3 * t_tiny / iters;
  state.counters["tiny_each_ms"] = 1e3 * t_each / iters;
  state.counters["tiny_over_one"] = t_tiny / t_one;
  state.counters["each_over_one"] = t_each / t_one;
  state.counters["threads"] = Kokkos::DefaultHostExecutionSpace().concurrency();
}

template <class DeviceExec, class StateMem>
void register_offload(const std::string& space) {
  const auto sizes = pow2_sizes({24}, {22, 24});
  add("offload_bf16/" + space, bm_offload<DeviceExec, StateMem, kopt::bfloat16, kopt::bfloat16>,
      sizes);
  add("offload_bf16_remainder_bf16_state/" + space,
      bm_offload<DeviceExec, StateMem, kopt::bfloat16, kopt::bfloat16, Form::remainder_bf16_state>,
      sizes);
  if (full_suite())
    add("offload_fp32/" + space, bm_offload<DeviceExec, StateMem, float, float>, sizes);
  add("offload_tiny_params/" + space, bm_offload_tiny<DeviceExec, StateMem>,
      {smoke_suite() ? 100 : 100000});
}

}  // namespace

void register_offload_benchmarks() {
  register_offload<Kokkos::DefaultHostExecutionSpace, Kokkos::HostSpace>("host");
#ifdef KOKKOS_ENABLE_CUDA
  register_offload<Kokkos::Cuda, Kokkos::CudaHostPinnedSpace>("Cuda");
#endif
}

}  // namespace kopt_perf
