// The grad norm, and so every clipped param, has the same bits at every world size as in
// one process: shard boundaries of kopt's own (ZeRO-1/2) and of pre-sharded params at any
// offset. Pre-sharded grads are taken as reduced: ZeRO-2's average does not divide them.
// Runs at every world size (CTest: 1, 2, 3, 4 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>

#include "../hybrid_world.hpp"
#include "world.hpp"

namespace {
namespace test_norm_mpi {

using kopt::DType;
using kopt_test::Buffer;
using kopt_test::HybridWorld;
using kopt_test::ParamDef;

using kopt_test::sharded;
using kopt_test::world_rank;
using kopt_test::world_size;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ZeRO-1 cuts params at shard boundaries (inside params of 1000 and 8199 elements); with
// clipping on, every rank's norm and every param equal one process's, bitwise.
TEST(ShardedNorm, ClippedZero1StepIsOneProcessBitwise) {
  kopt::HybridOptions options;
  options.max_grad_norm = 0.3;
  const std::vector<kopt::AdamConfig> configs = {kopt::AdamConfig{},
                                                 kopt::AdamConfig{.lr = 3e-3, .amsgrad = true}};
  HybridWorld one(configs, kopt_test::mixed_defs(2), options, 41, {false, true});
  HybridWorld zero(configs, kopt_test::mixed_defs(2),
                   sharded(options, kopt::ZeroStage::one, kopt::GradReduction::sum), 41,
                   {false, true});
  for (int s = 0; s < 4; ++s) {
    one.new_grads();
    for (std::size_t j = 0; j < one.defs.size(); ++j) zero.grads[j].set(one.last_grads[j]);
    const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
    EXPECT_TRUE(same_bits(a.grad_norm, b.grad_norm)) << a.grad_norm << " vs " << b.grad_norm;
    EXPECT_TRUE(same_bits(a.clip_factor, b.clip_factor));
    EXPECT_LT(b.clip_factor, 1.0);
  }
  for (std::size_t j = 0; j < one.defs.size(); ++j)
    EXPECT_EQ(one.params[j].get(), zero.params[j].get()) << HybridWorld::name(j);
}

// Two params the training code shards itself, cut at offsets that are not multiples of
// anything (rank r holds [n r^2 / w^2 + 7 r, ...)), beside one that kopt cuts. Their grads
// arrive reduced (the average over ranks, as FSDP hands them over); kopt's own param gets
// the same grad on every rank, so its average is that grad exactly. Under ZeRO-2 average
// and sum alike: the norm, clip factor and params of one process on the whole tensors.
void presharded_match(kopt::GradReduction reduction) {
  const int world = world_size();
  const auto cut = [&](std::int64_t n, int r) {
    return r == world ? n : std::min(n, n * r * r / (world * world) + 7 * r);
  };
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> k(-100, 100);
  const auto random = [&](std::int64_t n) {  // multiples of 1/128: sums and means exact
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = k(rng) / 128.0;
    return v;
  };
  kopt_test::PreshardedModel model(cut, random);
  kopt::HybridOptions options;
  options.max_grad_norm = 0.5;
  kopt::HybridOptimizer one({model.whole}, options);
  kopt::HybridOptimizer zero({model.parts}, sharded(options, kopt::ZeroStage::two, reduction));
  for (int s = 0; s < 4; ++s) {
    for (std::size_t j = 0; j < 3; ++j) model.set_grad(j, random(model.sizes[j]));
    if (reduction == kopt::GradReduction::sum) {  // kopt's param: the ranks' grads add up
      std::vector<double> g = model.full_g[2].get();
      for (double& x : g) x *= world;
      model.full_g[2].set(g);
    }
    const kopt::StepStats a = one.step(), b = zero.step();
    EXPECT_TRUE(same_bits(a.grad_norm, b.grad_norm)) << a.grad_norm << " vs " << b.grad_norm;
    EXPECT_TRUE(same_bits(a.clip_factor, b.clip_factor));
    EXPECT_LT(b.clip_factor, 1.0);
  }
  model.expect_parts_match();
}

TEST(ShardedNorm, PreShardedGradsUnderZero2AverageAreTakenAsReduced) {
  presharded_match(kopt::GradReduction::average);
}
TEST(ShardedNorm, PreShardedGradsUnderZero2SumAreTakenAsReduced) {
  presharded_match(kopt::GradReduction::sum);
}

}  // namespace test_norm_mpi
}  // namespace
