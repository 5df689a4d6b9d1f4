// The offload pipeline's small copies batched (OffloadOptions::batch_copies_below): every
// copy of fewer bytes goes in one operation per chunk and direction (on a GPU one kernel, on
// the host one job of the copy worker), larger ones keep their own. Counted through the host
// queue's operation counter, and checked bitwise against every copy on its own.
#include <kopt/impl/copy_queue.hpp>

#include "hybrid_world.hpp"

namespace {

using namespace kopt_test;
using kopt::DType;

// One param dtype: the group's params then share one offload engine (one per param dtype).
constexpr std::size_t kTiny = 400;     // bf16 params of 5 elements...
constexpr std::size_t kLarge = 40000;  // ...and one of 80 KB in bf16, 160 KB of f32 grads

std::vector<ParamDef> many_tiny_and_one_large() {
  std::vector<ParamDef> defs;
  for (std::size_t j = 0; j < kTiny; ++j)
    defs.push_back({0, DType::bf16, j % 3 ? DType::bf16 : DType::f32, true, 5});
  defs.push_back({0, DType::bf16, DType::f32, true, kLarge});
  return defs;
}

HybridWorld offloaded(std::size_t batch_below) {
  kopt::HybridOptions options;
  options.max_grad_norm = 1.0;
  options.offload.batch_copies_below = batch_below;  // default chunks: all in one
  return HybridWorld({kopt::AdamConfig{.weight_decay = 0.01}}, many_tiny_and_one_large(), options,
                     17, {true});
}

// Operations enqueued by one step of `w` after new grads.
std::uint64_t operations_of_step(HybridWorld& w) {
  w.new_grads();
  const std::uint64_t before = kopt::Impl::host_copy_operations();
  w.opt->step();
  return kopt::Impl::host_copy_operations() - before;
}

TEST(OffloadBatches, ManyTinyParamsCostOneOperationPerChunkAndDirection) {
  HybridWorld batched = offloaded(std::size_t{64} << 10);  // the default
  HybridWorld each = offloaded(0);
  // Step 1 also brings every param to the host (its master is taken from it): grads and
  // params in one batch, the large param's grad and param on their own; back: one batch and
  // the large param.
  EXPECT_EQ(operations_of_step(batched), 3u + 2u);
  EXPECT_EQ(operations_of_step(each), 2 * (kTiny + 1) + (kTiny + 1));
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(operations_of_step(batched), 2u + 2u);
    EXPECT_EQ(operations_of_step(each), 2 * (kTiny + 1));
  }
  // After a model reload the params come along with the next grads again, still batched.
  for (HybridWorld* w : {&batched, &each}) {
    for (std::size_t j = 0; j < w->defs.size(); j += 7) w->params[j].set(w->random(w->defs[j].n));
    w->opt->reload_model_params();
  }
  for (std::size_t j = 0; j < each.defs.size(); j += 7) each.params[j].set(batched.params[j].get());
  EXPECT_EQ(operations_of_step(batched), 3u + 2u);
  EXPECT_EQ(operations_of_step(each), 2 * (kTiny + 1) + (kTiny + 1));
  for (std::size_t j = 0; j < batched.defs.size(); ++j)
    ASSERT_EQ(batched.params[j].get(), each.params[j].get()) << batched.name(j);
}

// Batched copies land where their own would: the offloaded run matches the same params
// updated beside their memory bitwise, with small chunks (many batches, each its own slice of
// the ops) and a slow link, so ops reused or read before their copies ran would show.
TEST(OffloadBatches, BatchedRunsMatchLocalGroupsBitwise) {
  kopt::HybridOptions options;
  options.max_grad_norm = 0.5;
  options.offload.chunk_elements = 4096;
  options.offload.staging_buffers = 2;
  options.offload.batch_copies_below = 64;  // pieces of up to 15 f32 or 31 bf16 elements
  std::vector<ParamDef> defs;
  for (std::size_t j = 0; j < 600; ++j)
    defs.push_back(
        {0, j % 3 ? DType::bf16 : DType::f32, j % 2 ? DType::f16 : DType::f32, true, 1 + j % 37});
  HybridWorld local({kopt::AdamConfig{}}, defs, options, 5);
  HybridWorld off({kopt::AdamConfig{}}, defs, options, 5, {true});
  kopt::Impl::set_host_copy_latency(std::chrono::microseconds(20), std::chrono::microseconds(60));
  for (int s = 0; s < 3; ++s) {
    for (HybridWorld* w : {&local, &off}) w->new_grads();
    local.opt->step();
    off.opt->step();
  }
  kopt::Impl::set_host_copy_latency(std::chrono::microseconds(0), std::chrono::microseconds(0));
  for (std::size_t j = 0; j < defs.size(); ++j)
    ASSERT_EQ(local.params[j].get(), off.params[j].get()) << local.name(j);
}

}  // namespace
