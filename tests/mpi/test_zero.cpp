// The sharded HybridOptimizer over MPI (ZeRO-1/2), checked against one process stepping the
// same data on every rank. Runs at any world size (CTest: 1, 2, 3, 4 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>

#include "../hybrid_world.hpp"
#include "../test_support.hpp"
#include "world.hpp"

namespace {
namespace test_zero {

using kopt::DType;
using kopt_test::expect_error;
using kopt_test::HybridWorld;
using kopt_test::ParamDef;

using kopt_test::sharded;
using kopt_test::world_rank;
using kopt_test::world_size;

// Three groups of different configs; sizes that do not divide evenly, a param smaller than
// one shard, and (at 3-4 ranks) ranks whose shard of group 2 is empty.
std::vector<kopt::AdamConfig> configs() {
  return {kopt::AdamConfig{},
          kopt::AdamConfig{.lr = 3e-3, .beta2 = 0.99, .weight_decay = 0.1, .amsgrad = true},
          kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.0, .decoupled = false}};
}
std::vector<ParamDef> defs(DType grad_override = DType::i32) {
  std::vector<ParamDef> d = kopt_test::mixed_defs(2);
  d.push_back(ParamDef{2, DType::bf16, DType::bf16, false, 3});
  d.push_back(ParamDef{2, DType::f32, DType::f32, true, 1});
  if (grad_override != DType::i32)
    for (ParamDef& x : d) x.grad = grad_override;
  return d;
}

// Rank 0's values, bitwise, on every rank.
void expect_same_on_every_rank(std::vector<double> v, const std::string& what) {
  std::vector<double> root = v;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(root.data(), v.data(), v.size() * sizeof(double)), 0)
      << what << " differs from rank 0's";
}

void expect_params_equal(HybridWorld& a, HybridWorld& b) {
  for (std::size_t j = 0; j < a.defs.size(); ++j) {
    EXPECT_EQ(a.params[j].get(), b.params[j].get()) << HybridWorld::name(j);
    EXPECT_EQ(a.opt->step_count(HybridWorld::name(j)), b.opt->step_count(HybridWorld::name(j)));
  }
}

// Relative bound for params that went through a grad norm differing in its last bits.
double bound_for(DType t) {
  return t == DType::f32 ? 1e-6 : t == DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
}

TEST(Zero1, MatchesOneProcessBitwise) {
  kopt::HybridOptions options;
  options.loss_scaling = kopt::LossScalerOptions{.init_scale = 256, .growth_interval = 3};
  // Group 2 offloaded (StatePlacement::host) in both.
  HybridWorld one(configs(), defs(), options, 21, {false, false, true});
  HybridWorld zero(configs(), defs(), sharded(options, kopt::ZeroStage::one), 21,
                   {false, false, true});
  for (int s = 0; s < 8; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    for (HybridWorld* w : {&one, &zero}) {
      w->new_grads(w->opt->loss_scale());
      if (s == 4) w->opt->set_grad(HybridWorld::name(2), kopt::Tensor{});  // frozen
      if (s == 6) w->opt->set_grad(HybridWorld::name(2), w->grads[2].tensor());
      if (s == 5) w->opt->group(1).config().lr *= 0.5;
    }
    const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
    EXPECT_EQ(a.skipped, b.skipped);
    EXPECT_EQ(a.loss_scale, b.loss_scale);
    expect_params_equal(one, zero);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Zero1, ClipsIdenticallyOnEveryRank) {
  kopt::HybridOptions options;
  options.max_grad_norm = 0.3;
  HybridWorld one(configs(), defs(), options, 22);
  HybridWorld zero(configs(), defs(), sharded(options, kopt::ZeroStage::one), 22);
  for (int s = 0; s < 5; ++s) {
    for (HybridWorld* w : {&one, &zero}) w->new_grads();
    const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-12 * a.grad_norm);
    EXPECT_LT(b.clip_factor, 1.0);
    expect_same_on_every_rank({b.grad_norm, b.clip_factor}, "the grad norm");
  }
  for (std::size_t j = 0; j < one.defs.size(); ++j) {
    expect_same_on_every_rank(zero.params[j].get(), HybridWorld::name(j));
    EXPECT_LT(kopt_test::relative_error(zero.params[j].get(), one.params[j].get()),
              bound_for(one.defs[j].param))
        << HybridWorld::name(j);
  }
}

// Per rank, grads of small multiples of 1/128: their sum over ranks is exact in any order,
// so one process given the sum sees bitwise what ZeRO-2's reduce-scatter produces.
struct RankGrads {
  std::vector<std::vector<double>> mine, sum;
};
RankGrads rank_grads(const std::vector<ParamDef>& d, int step) {
  RankGrads out;
  for (std::size_t j = 0; j < d.size(); ++j) {
    out.mine.emplace_back(d[j].n, 0.0);
    out.sum.emplace_back(d[j].n, 0.0);
  }
  for (int r = 0; r < world_size(); ++r) {
    std::mt19937 rng(static_cast<unsigned>(1000 * step + r));
    std::uniform_int_distribution<int> k(-100, 100);
    for (std::size_t j = 0; j < d.size(); ++j)
      for (std::size_t i = 0; i < d[j].n; ++i) {
        const double g = k(rng) / 128.0;
        out.sum[j][i] += g;
        if (r == world_rank()) out.mine[j][i] = g;
      }
  }
  return out;
}

TEST(Zero2, ReduceScatterOfSumsMatchesOneProcessBitwise) {
  const std::vector<ParamDef> zero_defs = defs();
  // ZeRO-2 reduces in f32: one process gets f32 grads. Group 1 offloaded in both.
  HybridWorld one(configs(), defs(DType::f32), {}, 23, {false, true});
  HybridWorld zero(configs(), zero_defs, sharded({}, kopt::ZeroStage::two), 23, {false, true});
  for (int s = 0; s < 6; ++s) {
    const RankGrads g = rank_grads(zero_defs, s);
    for (std::size_t j = 0; j < zero_defs.size(); ++j) {
      zero.grads[j].set(g.mine[j]);
      one.grads[j].set(g.sum[j]);
    }
    const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
    EXPECT_EQ(a.skipped, b.skipped);
    expect_params_equal(one, zero);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Zero2, AveragesTheRanksGradsAndClipsIdentically) {
  kopt::HybridOptions options;
  options.max_grad_norm = 0.3;
  const std::vector<ParamDef> zero_defs = defs();
  HybridWorld one(configs(), defs(DType::f32), options, 24);
  HybridWorld zero(configs(), zero_defs,
                   sharded(options, kopt::ZeroStage::two, kopt::GradReduction::average), 24);
  for (int s = 0; s < 5; ++s) {
    RankGrads g = rank_grads(zero_defs, s);
    for (std::size_t j = 0; j < zero_defs.size(); ++j) {
      for (double& x : g.sum[j]) x /= world_size();
      zero.grads[j].set(g.mine[j]);
      one.grads[j].set(g.sum[j]);
    }
    const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-6 * a.grad_norm);
    expect_same_on_every_rank({b.grad_norm, b.clip_factor}, "the grad norm");
  }
  for (std::size_t j = 0; j < one.defs.size(); ++j) {
    expect_same_on_every_rank(zero.params[j].get(), HybridWorld::name(j));
    EXPECT_LT(kopt_test::relative_error(zero.params[j].get(), one.params[j].get()),
              bound_for(one.defs[j].param))
        << HybridWorld::name(j);
  }
}

// The rank that owns element 0 of param j (group g) under `stage`: with ZeRO-1 only the
// owner's copy of a grad element is read, so that is where an overflow must sit.
TEST(Sharded, AnInfOnOneRankSkipsTheStepOnEveryRank) {
  for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
    SCOPED_TRACE(stage == kopt::ZeroStage::one ? "ZeRO-1" : "ZeRO-2");
    kopt::HybridOptions options;
    options.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024};
    HybridWorld w(configs(), defs(), sharded(options, stage), 25);
    // Param 2 of group 0 (1000 elements): its first element, on the rank whose shard has it.
    std::vector<std::int64_t> numels;
    for (const ParamDef& d : w.defs)
      if (d.group == 0) numels.push_back(static_cast<std::int64_t>(d.n));
    const kopt::ShardLayout layout(numels, world_size());
    int owner = 0;
    kopt::ShardSegment seg{};
    for (int r = 0; r < world_size(); ++r)
      if (layout.find_segment(r, 2, seg) && seg.param_offset == 0) owner = r;
    w.new_grads(w.opt->loss_scale());
    if (world_rank() == owner) w.grads[2].poke(0, INFINITY);
    const std::vector<double> before = w.params[5].get();
    const kopt::StepStats st = w.opt->step();
    EXPECT_TRUE(st.skipped);
    EXPECT_EQ(st.loss_scale, 512.0);
    EXPECT_EQ(w.params[5].get(), before);
    EXPECT_EQ(w.opt->step_count(HybridWorld::name(5)), 0);
    w.new_grads(w.opt->loss_scale());
    EXPECT_FALSE(w.opt->step().skipped);
  }
}

// Two params the training code shards itself (unequal parts; at 4 ranks rank 0's part of
// the bf16 one is small), beside one kopt cuts, step as in one process on the whole tensors.
TEST(Sharded, PreShardedParamsMatchTheUnshardedRun) {
  const int world = world_size();
  const auto bound = [&](std::int64_t n, int r) { return n * r * r / (world * world); };
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> dist(-1, 1);
  const auto random = [&](std::int64_t n) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = dist(rng);
    return v;
  };
  kopt_test::PreshardedModel model(bound, random);
  kopt::HybridOptions options;
  options.loss_scaling = kopt::LossScalerOptions{.init_scale = 8};
  kopt::HybridOptimizer one({model.whole}, options);
  kopt::HybridOptimizer zero({model.parts}, sharded(options, kopt::ZeroStage::one));
  for (int s = 0; s < 6; ++s) {
    for (std::size_t j = 0; j < 3; ++j) {
      std::vector<double> g = random(model.sizes[j]);
      for (double& x : g) x *= 8;
      model.set_grad(j, g);
    }
    EXPECT_EQ(one.step().skipped, zero.step().skipped);
    // A rebind keeps the piece where it was: its state is keyed by where it sits. One that
    // moves it (a re-cut) is refused on this rank, naming both, and changes nothing.
    const kopt::Tensor p = model.part_p[0].tensor(), g = model.part_g[0].tensor();
    const std::int64_t n = model.sizes[0], lo = model.lo[0], len = model.len[0];
    const std::int64_t elsewhere = lo > 0 ? lo - 1 : lo + len < n ? lo + 1 : -1;
    if (elsewhere >= 0)  // not where one rank holds it all
      expect_error<kopt::ShapeMismatch>(
          [&] { zero.rebind("w0", p.shard_of(n, elsewhere), g.shard_of(n, lo)); },
          "(elements " + std::to_string(lo) + ".. of 1001), not");
    expect_error<kopt::ShapeMismatch>([&] { zero.rebind("w0", p.shard_of(n + 1, lo), g); },
                                      "of 1002)");
    zero.rebind("w0", p.shard_of(n, lo), g.shard_of(n, lo));  // the same place: fine
  }
  model.expect_parts_match();
}

TEST(Sharded, EachRankHoldsAboutOneWorldSizeOfTheState) {
  std::vector<ParamDef> d;
  std::vector<std::int64_t> numels;
  for (const std::size_t n : {100000u, 33333u, 4099u, 7u, 1u}) {
    d.push_back(ParamDef{0, DType::f32, DType::f32, false, n});
    numels.push_back(static_cast<std::int64_t>(n));
  }
  const kopt::AdamConfig config{};  // fp32, no amsgrad: m and v, 8 B per element
  HybridWorld one({config}, d, {}, 41);
  HybridWorld zero({config}, d, sharded({}, kopt::ZeroStage::one), 41);
  for (HybridWorld* w : {&one, &zero}) {  // state is allocated on the first step
    w->new_grads();
    w->opt->step();
  }
  const auto bytes = [](HybridWorld& w) {
    std::size_t b = 0;
    for (const auto& [space, n] : w.opt->state_bytes()) b += n;
    return b;
  };
  const std::size_t all = bytes(one), mine = bytes(zero);
  const kopt::ShardLayout layout(numels, world_size());
  const std::size_t segments = layout.segments(world_rank()).size();
  // Each of this rank's segments pads its state to 16 elements; the shard is 1/world.
  EXPECT_LE(mine, static_cast<std::size_t>(layout.shard_size() + 16 * segments) * 8);
  EXPECT_LE(mine, all / static_cast<std::size_t>(world_size()) + (16 * segments + 16) * 8);
  unsigned long long total = mine;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GE(total, 137440ull * 8);  // every element's state is somewhere
  EXPECT_LE(total, all + static_cast<std::size_t>(world_size()) * numels.size() * 16 * 8);
  std::printf("rank %d of %d: %zu state bytes, unsharded %zu (ratio %.3f)\n", world_rank(),
              world_size(), mine, all, static_cast<double>(mine) / static_cast<double>(all));
}

}  // namespace test_zero
}  // namespace
