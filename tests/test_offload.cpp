// The offload engine (StatePlacement::host): state in host memory, grads and params moved
// in chunks by two copy queues. On a host-only build the "device" is the host and the copy
// queues are worker threads, so these tests run the whole pipeline (chunking, ordering,
// waiting) in CI; on a CUDA build the device params go through CUDA streams.
#include <kopt/impl/copy_queue.hpp>

#include "adam_case.hpp"
#include "hybrid_world.hpp"

namespace {
namespace test_offload {

using namespace kopt_test;
using kopt::DType;

constexpr bool kHasDevice =
    !std::is_same_v<Kokkos::DefaultExecutionSpace::memory_space, Kokkos::HostSpace>;

// Params of every group in f32, bf16 and f16 with f32/f16/bf16 grads, half "on device".
std::vector<ParamDef> defs_of_sizes(std::size_t groups, const std::vector<std::size_t>& sizes) {
  std::vector<ParamDef> defs = mixed_defs(groups);
  for (std::size_t j = 0; j < defs.size(); ++j) defs[j].n = sizes[j % sizes.size()];
  return defs;
}

std::vector<kopt::AdamConfig> three_configs() {
  std::vector<kopt::AdamConfig> all = every_variant();
  return {all[1], all[2], all[4]};  // Adam + L2, AMSGrad, no bias correction
}

void expect_same_stats(const kopt::StepStats& a, const kopt::StepStats& b) {
  // Bitwise: the norm is summed per param in registration order whatever the engines.
  EXPECT_EQ(std::isnan(a.grad_norm), std::isnan(b.grad_norm));
  if (!std::isnan(a.grad_norm)) {
    EXPECT_EQ(a.grad_norm, b.grad_norm);
  }
  EXPECT_EQ(a.clip_factor, b.clip_factor);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
}

void expect_same_params(HybridWorld& local, HybridWorld& off) {
  for (std::size_t j = 0; j < local.defs.size(); ++j) {
    // get() fences Kokkos, not the offload copy queues: a step() that returned before its
    // last param copy landed would show here as stale values.
    EXPECT_EQ(local.params[j].get(), off.params[j].get()) << local.name(j);
    EXPECT_EQ(local.opt->step_count(local.name(j)), off.opt->step_count(off.name(j)));
  }
}

// Host copies that take a while, as over a real link: a pipeline step that uses a copy before
// waiting for it (or returns before the last one) then fails every time.
// Params going back take three times as long as grads coming in, so a staging buffer reused
// before its params have left is overwritten while they are still being read.
struct SlowLink {
  explicit SlowLink(int us) {
    kopt::Impl::set_host_copy_latency(std::chrono::microseconds(us),
                                      std::chrono::microseconds(3 * us));
  }
  ~SlowLink() {
    kopt::Impl::set_host_copy_latency(std::chrono::microseconds(0), std::chrono::microseconds(0));
  }
};

// The copy workers of the host offload engines built in its scope. With one per direction,
// grads and params copies are ordered only by the pipeline's waits, as on a GPU's two copy
// engines; with the shared one (the default) the worker's FIFO orders them too.
using kopt::Impl::HostCopyWorkers;
struct CopyWorkers {
  explicit CopyWorkers(HostCopyWorkers w) { kopt::Impl::set_host_copy_workers(w); }
  ~CopyWorkers() { kopt::Impl::set_host_copy_workers(HostCopyWorkers::shared); }
};
constexpr HostCopyWorkers both_worker_layouts[] = {HostCopyWorkers::shared,
                                                   HostCopyWorkers::one_per_direction};

// Steps a world whose state sits beside its params and one with groups 0 and 2 offloaded on
// the same grads, with clipping and loss scaling on, an injected overflow (step 3), a frozen
// param (steps 5-6) and an lr change (step 6); expects bitwise-equal results after each step.
void expect_offload_matches_local(const std::vector<std::size_t>& sizes,
                                  std::int64_t chunk_elements, int staging_buffers, int steps,
                                  HostCopyWorkers workers) {
  const CopyWorkers layout(workers);
  kopt::HybridOptions options;
  options.max_grad_norm = 0.5;
  options.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 4};
  options.offload.chunk_elements = chunk_elements;
  options.offload.staging_buffers = staging_buffers;
  const auto defs = defs_of_sizes(3, sizes);
  HybridWorld local(three_configs(), defs, options, 7);
  HybridWorld off(three_configs(), defs, options, 7, {true, false, true});
  for (std::size_t j = 0; j < defs.size(); ++j)
    ASSERT_EQ(off.opt->is_offloaded(off.name(j)), defs[j].group != 1);
  const SlowLink slow(50);
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    for (HybridWorld* w : {&local, &off}) {
      w->new_grads(w->opt->loss_scale());
      if (s == 3) w->grads[0].poke(0, INFINITY);  // group 0: offloaded in `off`
      if (s == 5) w->opt->set_grad(w->name(4), kopt::Tensor{});
      if (s == 7) w->opt->set_grad(w->name(4), w->grads[4].tensor());
      if (s == 6) w->opt->group(2).config().lr *= 0.5;
    }
    const kopt::StepStats a = local.opt->step(), b = off.opt->step();
    expect_same_stats(a, b);
    EXPECT_EQ(a.skipped, s == 3);
    expect_same_params(local, off);
    if (::testing::Test::HasFailure()) return;
  }
}

void expect_offload_matches_local(const std::vector<std::size_t>& sizes,
                                  std::int64_t chunk_elements, int staging_buffers, int steps) {
  for (const HostCopyWorkers workers : both_worker_layouts) {
    SCOPED_TRACE(workers == HostCopyWorkers::shared ? "one copy worker" : "one per direction");
    expect_offload_matches_local(sizes, chunk_elements, staging_buffers, steps, workers);
  }
}

TEST(Offload, MatchesLocalBitwiseWithOneElementChunks) {
  expect_offload_matches_local({1, 13, 40, 7}, 1, 2, 9);
}
TEST(Offload, MatchesLocalBitwiseWithSevenElementChunks) {
  expect_offload_matches_local({1, 13, 40, 7}, 7, 3, 9);
}
TEST(Offload, MatchesLocalBitwiseWithChunksAcrossParams) {
  expect_offload_matches_local({1, 13, 1000, 8199}, 4096, 3, 9);
}
TEST(Offload, MatchesLocalBitwiseWithAChunkLargerThanEverything) {
  expect_offload_matches_local({1, 13, 1000, 8199}, std::int64_t{1} << 20, 2, 9);
}
TEST(Offload, MatchesLocalBitwiseWhenOneParamSpansManyStagingBuffers) {
  // One bf16 param of 50,003 elements through two 4096-element staging buffers.
  kopt::HybridOptions options;
  options.max_grad_norm = 1.0;
  options.offload.chunk_elements = 4096;
  options.offload.staging_buffers = 2;
  const std::vector<ParamDef> defs{{0, DType::bf16, DType::f32, true, 50003}};
  const CopyWorkers layout(HostCopyWorkers::one_per_direction);
  HybridWorld local({kopt::AdamConfig{}}, defs, options, 9);
  HybridWorld off({kopt::AdamConfig{}}, defs, options, 9, {true});
  const SlowLink slow(100);
  for (int s = 0; s < 10; ++s) {
    for (HybridWorld* w : {&local, &off}) w->new_grads();
    expect_same_stats(local.opt->step(), off.opt->step());
    off.reference_step(1.0);
  }
  expect_same_params(local, off);
  off.expect_matches_reference(fp32_bound(10));
}

TEST(Offload, EveryVariantMatchesTheDoublePrecisionReference) {
  HybridWorld w(every_variant(), mixed_defs(5), {}, 13, std::vector<bool>(5, true));
  for (int s = 0; s < 20; ++s) {
    w.new_grads();
    w.opt->step();
    w.reference_step(1.0);
  }
  w.expect_matches_reference(fp32_bound(20));
}

// A framework swaps the tensors of offloaded params for copies in new memory; later the model
// weights are reloaded: the offloaded run keeps matching the local one bitwise, and the first
// step after the reload starts from the loaded weights (the host masters were refreshed).
TEST(Offload, RebindAndModelReloadWorkAsOnLocalGroups) {
  kopt::HybridOptions options;
  options.offload.chunk_elements = 300;
  const auto defs = defs_of_sizes(2, {1, 13, 1000, 517});
  HybridWorld local(three_configs(), defs, options, 21);
  HybridWorld off(three_configs(), defs, options, 21, {true, true});
  std::vector<std::vector<Buffer>> keep(2);  // the replaced memory stays alive
  for (int s = 0; s < 8; ++s) {
    for (HybridWorld* w : {&local, &off}) {
      if (s == 3)
        for (std::size_t j = 0; j < defs.size(); ++j) {
          Buffer p(defs[j].param, defs[j].on_device, defs[j].n),
              g(defs[j].grad, defs[j].on_device, defs[j].n);
          p.set(w->params[j].get());
          keep[w == &off].push_back(w->params[j]);
          w->params[j] = p;
          w->grads[j] = g;
          w->opt->rebind(w->name(j), w->params[j].tensor(), w->grads[j].tensor());
        }
      if (s == 5) {
        for (std::size_t j = 0; j < defs.size(); ++j) w->params[j].set(w->random(defs[j].n, 2, 3));
        w->opt->reload_model_params();
      }
      w->new_grads();
    }
    if (s == 5)
      for (std::size_t j = 0; j < defs.size(); ++j) off.refs[j].param = off.params[j].get();
    expect_same_stats(local.opt->step(), off.opt->step());
    expect_same_params(local, off);
  }
  // The 2 steps since the reload, by the reference from the loaded weights.
  for (std::size_t j = 0; j < defs.size(); ++j)
    EXPECT_GT(off.params[j].get()[0], 1.5) << off.name(j);
}

// Offloaded state is host memory: with every group offloaded the optimizer reports no state
// in the device's space, and exactly moments + an fp32 master of every element on the host.
TEST(Offload, TheDeviceHoldsNoStateForOffloadedParams) {
  std::vector<kopt::AdamConfig> configs{kopt::AdamConfig{}, kopt::AdamConfig{.lr = 0.1}};
  const auto defs = mixed_defs(2);
  HybridWorld off(configs, defs, {}, 3, {true, true});
  HybridWorld local(configs, defs, {}, 3);
  for (HybridWorld* w : {&off, &local}) {
    w->new_grads();
    w->opt->step();
  }
  const std::string host = Kokkos::DefaultHostExecutionSpace::name();
  std::size_t expected = 0;
  for (const ParamDef& d : defs) expected += (d.n + 15) / 16 * 16 * 3 * sizeof(float);
  const auto off_bytes = off.opt->state_bytes();
  ASSERT_EQ(off_bytes.size(), 1u) << "all of it in one space";
  EXPECT_EQ(off_bytes.begin()->first, host);
  EXPECT_EQ(off_bytes.begin()->second, expected);
  if (kHasDevice) {
    EXPECT_GT(local.opt->state_bytes()[Kokkos::DefaultExecutionSpace::name()], 0u);
  }
  for (std::size_t j = 0; j < defs.size(); ++j) EXPECT_TRUE(off.opt->is_offloaded(off.name(j)));
}

// The staging buffers are the offload pipeline's workspace, in host memory beside the state:
// staging_buffers x chunk_elements x 2 (grads, params) x 4 bytes per offload engine (here
// three, one per param dtype), whatever the params' sizes.
TEST(Offload, WorkspaceBytesCountTheStagingBuffers) {
  std::vector<kopt::AdamConfig> configs{kopt::AdamConfig{}, kopt::AdamConfig{.lr = 0.1}};
  const auto defs = mixed_defs(2);
  kopt::HybridOptions options;
  options.offload.chunk_elements = 4096;
  options.offload.staging_buffers = 2;
  HybridWorld off(configs, defs, options, 3, {true, true});
  HybridWorld local(configs, defs, options, 3);
  for (HybridWorld* w : {&off, &local}) {
    w->new_grads();
    w->opt->step();
  }
  const std::string host = Kokkos::DefaultHostExecutionSpace::name();
  const std::size_t staging = 2 * 4096 * 2 * 4 * off.opt->num_engines();
  EXPECT_EQ(off.opt->num_engines(), 3u);
  EXPECT_GE(off.opt->workspace_bytes()[host], staging);
  EXPECT_LT(off.opt->workspace_bytes()[host], staging + 64 * 1024) << "only tables besides";
  std::size_t local_bytes = 0;
  for (const auto& [space, bytes] : local.opt->workspace_bytes()) local_bytes += bytes;
  EXPECT_GT(local_bytes, 0u) << "its chunk tables and slots";
  EXPECT_LT(local_bytes, staging) << "no staging where nothing is offloaded";
}

TEST(Offload, SelectionTakesTheLargestParamsFirst) {
  const std::vector<std::size_t> bytes{100, 300, 200, 300};
  const auto pick = [&](std::optional<double> fraction, std::optional<std::size_t> budget) {
    kopt::OffloadOptions o;
    o.fraction = fraction;
    o.device_state_budget = budget;
    return kopt::select_offloaded(bytes, o);
  };
  using V = std::vector<bool>;
  EXPECT_EQ(pick(std::nullopt, std::nullopt), V({false, false, false, false}));
  EXPECT_EQ(pick(0.0, std::nullopt), V({false, false, false, false}));
  EXPECT_EQ(pick(0.3, std::nullopt), V({false, true, false, false}));  // 300 >= 270
  EXPECT_EQ(pick(0.5, std::nullopt), V({false, true, false, true}));   // ties: earlier first
  EXPECT_EQ(pick(0.8, std::nullopt), V({false, true, true, true}));
  EXPECT_EQ(pick(1.0, std::nullopt), V({true, true, true, true}));
  EXPECT_EQ(pick(std::nullopt, 600), V({false, true, false, false}));
  EXPECT_EQ(pick(std::nullopt, 599), V({false, true, false, true}));
  EXPECT_EQ(pick(std::nullopt, 0), V({true, true, true, true}));
  EXPECT_EQ(pick(0.1, 700), V({false, true, false, false}));  // both must hold
  EXPECT_EQ(pick(0.5, 900), V({false, true, false, true}));
  EXPECT_TRUE(kopt::select_offloaded({}, kopt::OffloadOptions{.fraction = 1.0}).empty());
}

TEST(Offload, TheFractionPicksDeviceParamsOnly) {
  kopt::HybridOptions options;
  options.offload.fraction = 1.0;
  const auto defs = mixed_defs(2);
  HybridWorld w({kopt::AdamConfig{}, kopt::AdamConfig{}}, defs, options, 3, {true, false});
  for (std::size_t j = 0; j < defs.size(); ++j) {
    const bool expected = defs[j].group == 0 || (defs[j].on_device && kHasDevice);
    EXPECT_EQ(w.opt->is_offloaded(w.name(j)), expected) << w.name(j);
  }
  for (int s = 0; s < 3; ++s) {
    w.new_grads();
    w.opt->step();
    w.reference_step(1.0);
  }
  w.expect_matches_reference(fp32_bound(3));
}

TEST(Offload, BadOptionsAreRefusedByName) {
  const auto build = [](kopt::OffloadOptions o) {
    kopt::ParamGroup g({}, kopt::StatePlacement::host);
    kopt::HybridOptions options;
    options.offload = o;
    kopt::HybridOptimizer opt({g}, options);
  };
  expect_error<kopt::InvalidArgument>([&] { build({.chunk_elements = 0}); }, "chunk_elements = 0");
  expect_error<kopt::InvalidArgument>([&] { build({.staging_buffers = 1}); },
                                      "staging_buffers = 1");
  expect_error<kopt::InvalidArgument>([&] { build({.fraction = 1.5}); }, "fraction = 1.5");
  expect_error<kopt::InvalidArgument>([&] { build({.fraction = NAN}); }, "fraction = nan");
  expect_error<kopt::InvalidArgument>(
      [] { kopt::ParamGroup({}, static_cast<kopt::StatePlacement>(7)); }, "StatePlacement 7");
}

// The host copy queue runs copies in order and a wait covers exactly the copies before it.
TEST(Offload, HostCopyQueueWaitsForExactlyWhatWasMarked) {
  const SlowLink slow(20);
  auto q = kopt::Impl::make_host_copy_queue();
  std::vector<int> src(200), dst(200, -1);
  for (int i = 0; i < 200; ++i) src[i] = i;
  for (int i = 0; i < 100; ++i) q->copy(&dst[i], &src[i], sizeof(int));
  const auto half = q->mark();
  for (int i = 100; i < 200; ++i) q->copy(&dst[i], &src[i], sizeof(int));
  q->wait(half);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(dst[i], i);
  q->drain();
  EXPECT_EQ(dst, src);
}

}  // namespace test_offload
}  // namespace
