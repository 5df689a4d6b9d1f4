// The offload pipeline's small copies batched (OffloadOptions::batch_copies_below): every
// copy of fewer bytes goes in one operation per chunk and direction (on a GPU one kernel, on
// the host one job of the copy worker), larger ones keep their own. Counted through the host
// queue's operation counter, and checked bitwise against every copy on its own.
#include <kopt/impl/copy_queue.hpp>
#include <memory>
#include <random>
#include <string>

#include "hybrid_world.hpp"

namespace {
namespace test_offload_batches {

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

// Params cut one after another from one buffer (as a training code's flat buffers hold them)
// are staged one after another, so their copies join into pieces of up to batch_copies_below
// bytes: 3,000 bf16 params of 24 elements (48 bytes of grads, 48 of params), half with fp32
// masters, half with remainders (whose params come with their grads every step), the two
// halves an offload engine each. A step copies 72,000 bytes of grads per half (2 pieces
// each), the remainder half's params (2) and every param back (2 per half): 10 copies where
// each on its own (batch_copies_below = 0) is 7,500; the params bitwise the same.
struct FlatModel {
  static constexpr std::int64_t count = 3000, each = 24;
  Kokkos::View<kopt::bfloat16*, Kokkos::HostSpace> param{"flat_param", count*each},
      grad{"flat_grad", count*each};
  std::unique_ptr<kopt::HybridOptimizer> opt;

  explicit FlatModel(std::size_t batch_below) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (std::int64_t i = 0; i < param.extent_int(0); ++i)
      param(i) = kopt::bfloat16::from_float(normal(rng));
    kopt::ParamGroup masters(kopt::AdamConfig{.weight_decay = 0.01}, kopt::StatePlacement::host);
    kopt::ParamGroup remainders(kopt::AdamConfig{.lr = 2e-3}, kopt::StatePlacement::host);
    remainders.set_master(kopt::MasterStorage::remainder);
    for (std::int64_t k = 0; k < count; ++k) {
      const auto piece = std::make_pair(k * each, (k + 1) * each);
      (k < count / 2 ? masters : remainders)
          .add("p" + std::to_string(k), kopt::Tensor(Kokkos::subview(param, piece)),
               kopt::Tensor(Kokkos::subview(grad, piece)));
    }
    kopt::HybridOptions options;
    options.offload.batch_copies_below = batch_below;
    opt = std::make_unique<kopt::HybridOptimizer>(std::vector{masters, remainders}, options);
  }
  // Copies enqueued by one step after grads drawn from `seed`.
  std::uint64_t copies_of_step(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (std::int64_t i = 0; i < grad.extent_int(0); ++i)
      grad(i) = kopt::bfloat16::from_float(0.1f * normal(rng));
    const std::uint64_t before = kopt::Impl::host_copies();
    opt->step();
    return kopt::Impl::host_copies() - before;
  }
};

TEST(OffloadBatches, ParamsCutFromOneBufferCopyAsOnePiecePerBatchLimit) {
  FlatModel joined(std::size_t{64} << 10), each(0);
  for (unsigned s = 0; s < 4; ++s) {
    const std::uint64_t a = joined.copies_of_step(s), b = each.copies_of_step(s);
    if (s > 0) {  // the first step also brings every param (its master is taken from it)
      EXPECT_EQ(a, 10u) << "step " << s;
      EXPECT_EQ(b, 7500u) << "step " << s;
    }
  }
  for (std::int64_t i = 0; i < joined.param.extent_int(0); ++i)
    ASSERT_EQ(joined.param(i).bits, each.param(i).bits) << "element " << i;
}

}  // namespace test_offload_batches
}  // namespace
