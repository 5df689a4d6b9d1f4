// kopt::ShardLayout, Tensor::shard_of, and the sharded HybridOptimizer in a world of one
// process (the MPI worlds are in tests/mpi/).
#include <gtest/gtest.h>

#include <algorithm>
#include <kopt/kopt.hpp>

#include "checkpoint_model.hpp"
#include "hybrid_world.hpp"
#include "test_support.hpp"

namespace {
namespace test_shard_layout {

using kopt::ShardLayout;
using kopt_test::HybridWorld;
using kopt_test::ParamDef;

// Every element of every param is in exactly one rank's shard, at the place the layout says.
void expect_exact_cover(const std::vector<std::int64_t>& numels, int world,
                        std::int64_t align = ShardLayout::alignment) {
  SCOPED_TRACE("world " + std::to_string(world) + ", align " + std::to_string(align));
  const ShardLayout layout(numels, world, align);
  EXPECT_EQ(layout.align(), align);
  EXPECT_EQ(layout.shard_size() % align, 0);
  EXPECT_EQ(layout.padded_size(), layout.shard_size() * world);
  std::vector<std::vector<int>> owner(numels.size());
  for (std::size_t p = 0; p < numels.size(); ++p) {
    owner[p].assign(static_cast<std::size_t>(numels[p]), -1);
    EXPECT_EQ(layout.param_start(p) % align, 0);
    if (p > 0) {
      EXPECT_GE(layout.param_start(p), layout.param_start(p - 1) + numels[p - 1]);
    }
  }
  for (int r = 0; r < world; ++r) {
    std::int64_t last_end = -1;
    for (const kopt::ShardSegment& s : layout.segments(r)) {
      EXPECT_GT(s.length, 0);
      // Whole aligned pieces: a segment starts on the alignment within its param (q8 blocks)
      EXPECT_EQ(s.param_offset % align, 0);
      EXPECT_GE(s.shard_offset, 0);
      EXPECT_LE(s.shard_offset + s.length, layout.shard_size());
      EXPECT_GT(s.shard_offset, last_end - 1);  // in shard order, not overlapping
      last_end = s.shard_offset + s.length;
      EXPECT_EQ(r * layout.shard_size() + s.shard_offset,
                layout.param_start(s.param) + s.param_offset);
      kopt::ShardSegment found{};
      ASSERT_TRUE(layout.find_segment(r, s.param, found));
      EXPECT_EQ(found.param_offset, s.param_offset);
      for (std::int64_t k = 0; k < s.length; ++k) {
        int& o = owner[s.param][static_cast<std::size_t>(s.param_offset + k)];
        EXPECT_EQ(o, -1) << "element owned twice";
        o = r;
      }
    }
  }
  for (std::size_t p = 0; p < numels.size(); ++p)
    for (const int o : owner[p]) ASSERT_NE(o, -1) << "param " << p << " has an element no one owns";
}

TEST(ShardLayout, EveryElementHasExactlyOneOwner) {
  for (int world = 1; world <= 7; ++world) {
    expect_exact_cover({1, 13, 40, 7, 1000, 3}, world);
    expect_exact_cover({0, 5, 0}, world);
    expect_exact_cover({100003}, world);
    expect_exact_cover({}, world);
    expect_exact_cover({1, 13, 40, 7, 1000, 3, 4099}, world, 256);  // q8 groups' layout
    expect_exact_cover({100003}, world, 256);
  }
}

TEST(ShardLayout, EmptyShardsAndStraddlingParamsAreNormal) {
  const ShardLayout one({1}, 4);  // 16 padded elements: one per... rank 0 only
  EXPECT_EQ(one.shard_size(), 16);
  EXPECT_EQ(one.segments(0).size(), 1u);
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(one.segments(r).empty());
  const ShardLayout cut({100}, 3);  // 112 padded: shards of 48, the param across all three
  EXPECT_EQ(cut.shard_size(), 48);
  EXPECT_EQ(cut.segments(1).at(0).param_offset, 48);
  EXPECT_EQ(cut.segments(2).at(0).length, 4);
}

// Muon's layout: every param whole on one rank (one segment, offset 0), the costliest first
// to the least-loaded rank, no rank's range overlapping another's, and the loads balanced as
// the rule says.
TEST(ShardLayout, WholeParamsAreNeverCutAndAreBalancedByCost) {
  const std::vector<std::int64_t> numels = {1000, 13, 4096, 0, 4096, 300, 1};
  const std::vector<double> costs = {8000, 13, 65536, 0, 65536, 3000, 1};
  for (int world = 1; world <= 5; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const ShardLayout layout = ShardLayout::whole_params(numels, costs, world);
    EXPECT_EQ(layout.shard_size() % ShardLayout::alignment, 0);
    std::vector<double> load(static_cast<std::size_t>(world), 0.0);
    std::vector<int> segments_of(numels.size(), 0);
    for (int r = 0; r < world; ++r) {
      std::int64_t used = 0;
      for (const kopt::ShardSegment& s : layout.segments(r)) {
        EXPECT_EQ(s.param_offset, 0);
        EXPECT_EQ(s.length, numels[s.param]) << "param " << s.param << " is cut";
        EXPECT_LE(s.shard_offset + s.length, layout.shard_size());
        EXPECT_EQ(layout.owner(s.param), r);
        ++segments_of[s.param];
        load[static_cast<std::size_t>(r)] += costs[s.param];
        used += s.length;
      }
      EXPECT_LE(used, layout.shard_size());
    }
    for (std::size_t p = 0; p < numels.size(); ++p)
      EXPECT_EQ(segments_of[p], numels[p] > 0 ? 1 : 0) << "param " << p;
    EXPECT_EQ(layout.owner(3), -1);  // empty
    // The two big matrices on two ranks where there are two; then the 1000-element one on a
    // third, or beside the lighter of them.
    if (world >= 2) {
      EXPECT_NE(layout.owner(2), layout.owner(4));
    }
    if (world >= 3) {
      EXPECT_NE(layout.owner(0), layout.owner(2));
      EXPECT_NE(layout.owner(0), layout.owner(4));
    }
    const double total = 8000 + 13 + 65536 * 2 + 3000 + 1;
    EXPECT_LE(*std::max_element(load.begin(), load.end()), std::max(65536.0, total / world) + 8000)
        << "unbalanced";
  }
  EXPECT_THROW(ShardLayout::whole_params({1, 2}, {1.0}, 2), kopt::InvalidArgument);
  EXPECT_THROW(ShardLayout::whole_params({1}, {-1.0}, 2), kopt::InvalidArgument);
  EXPECT_THROW(ShardLayout::whole_params({1}, {1.0}, 0), kopt::InvalidArgument);
}

TEST(ShardLayout, BadInputIsRefused) {
  EXPECT_THROW(ShardLayout({1}, 0), kopt::InvalidArgument);
  EXPECT_THROW(ShardLayout({-1}, 2), kopt::InvalidArgument);
  EXPECT_THROW(ShardLayout({1}, 2).segments(2), kopt::InvalidArgument);
  for (const std::int64_t align : {0, 8, 24, -16})
    EXPECT_THROW(ShardLayout({1}, 2, align), kopt::InvalidArgument) << align;
  EXPECT_THROW(ShardLayout::whole_params({1}, {1.0}, 2, 100), kopt::InvalidArgument);
}

TEST(ShardOf, MarksTheLocalPartAndChecksIt) {
  float data[10] = {};
  const kopt::Tensor t = kopt::Tensor::from(data, 10).shard_of(25, 15);
  EXPECT_TRUE(t.is_shard());
  EXPECT_EQ(t.global_numel, 25);
  EXPECT_EQ(t.global_offset, 15);
  EXPECT_FALSE(kopt::Tensor::from(data, 10).is_shard());
  EXPECT_THROW(kopt::Tensor::from(data, 10).shard_of(24, 15), kopt::InvalidArgument);
  EXPECT_THROW(kopt::Tensor::from(data, 10).shard_of(25, -1), kopt::InvalidArgument);
  const kopt::Tensor s = t.slice(2, 3);
  EXPECT_EQ(s.data, static_cast<void*>(data + 2));
  EXPECT_EQ(s.global_offset, 17);
  EXPECT_THROW(t.slice(8, 3), kopt::InvalidArgument);
}

std::vector<ParamDef> sharding_defs() {
  std::vector<ParamDef> defs = kopt_test::mixed_defs(2);
  defs.push_back(ParamDef{1, kopt::DType::bf16, kopt::DType::bf16, false, 0});  // empty
  return defs;
}

// A world of one that counts the collectives it is asked for.
class CountingCommunicator final : public kopt::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather_bytes(const void* in, void* out, const std::vector<std::size_t>& bytes) override {
    ++calls;
    one_.all_gather_bytes(in, out, bytes);
  }
  void reduce_scatter_sum(const float* in, float* out, std::size_t count) override {
    ++calls;
    one_.reduce_scatter_sum(in, out, count);
  }
  int calls = 0;

 private:
  kopt::SingleProcessCommunicator one_;
};

// A world of one: the sharded step (layout, norm combination, gathers) gives bitwise the
// unsharded result, with clipping and loss scaling on, at ZeRO-1 and ZeRO-2, and runs no
// collective (each would only copy: ZeRO-2's widening reduce-scatter of every grad cost 60
// of a 96 ms step).
TEST(ShardedOptimizer, AWorldOfOneMatchesTheUnshardedOneBitwise) {
  for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
    SCOPED_TRACE(stage == kopt::ZeroStage::one ? "ZeRO-1" : "ZeRO-2");
    kopt::HybridOptions options;
    options.max_grad_norm = 0.5;
    options.loss_scaling = kopt::LossScalerOptions{.init_scale = 64, .growth_interval = 3};
    const std::vector<ParamDef> defs = sharding_defs();  // some on the device (CUDA builds)
    HybridWorld plain({kopt::AdamConfig{}, kopt::AdamConfig{.lr = 3e-3, .amsgrad = true}}, defs,
                      options, 5);
    kopt::HybridOptions sharded_options = options;
    const auto comm = std::make_shared<CountingCommunicator>();
    sharded_options.sharding = kopt::ShardingOptions{comm, stage, kopt::GradReduction::average};
    HybridWorld sharded(plain.configs, defs, sharded_options, 5);
    for (int s = 0; s < 6; ++s) {
      for (HybridWorld* w : {&plain, &sharded}) {
        w->new_grads(w->opt->loss_scale());
        if (s == 2) w->grads[1].poke(0, INFINITY);
      }
      const kopt::StepStats a = plain.opt->step(), b = sharded.opt->step();
      EXPECT_EQ(a.grad_norm, b.grad_norm);
      EXPECT_EQ(a.skipped, b.skipped);
      EXPECT_EQ(a.skipped, s == 2);
      for (std::size_t j = 0; j < defs.size(); ++j) {
        EXPECT_EQ(plain.params[j].get(), sharded.params[j].get()) << HybridWorld::name(j);
        EXPECT_EQ(plain.opt->step_count(HybridWorld::name(j)),
                  sharded.opt->step_count(HybridWorld::name(j)));
      }
    }
    EXPECT_EQ(comm->calls, 0);
  }
}

// In a world of one, a tensor the training code cut (Tensor::shard_of) must be held whole:
// a part alone (state nobody keeps) is refused at construction, naming the elements; before,
// it built and stepped, and save() wrote a checkpoint that load() refused as incomplete.
TEST(ShardedOptimizer, APieceAloneInAWorldOfOneIsRefused) {
  std::vector<float> p(900, 0.5f), g(900, 0.25f);
  kopt::HybridOptions options;
  options.sharding = kopt::ShardingOptions{std::make_shared<kopt::SingleProcessCommunicator>()};
  const auto group = [&](std::int64_t global, std::int64_t offset) {
    kopt::ParamGroup pre;
    pre.add("s", kopt::Tensor::from(p.data(), 900).shard_of(global, offset),
            kopt::Tensor::from(g.data(), 900).shard_of(global, offset));
    return std::vector<kopt::ParamGroup>{pre};
  };
  kopt_test::expect_error<kopt::InvalidArgument>(
      [&] { kopt::HybridOptimizer opt(group(2000, 100), options); },
      "parameter 's' (2000 elements, cut by Tensor::shard_of): elements [0, 100) are held by no "
      "rank");
  kopt_test::expect_error<kopt::InvalidArgument>(
      [&] { kopt::HybridOptimizer opt(group(1000, 0), options); },
      "elements [900, 1000) are held by no rank");
  EXPECT_EQ(p[0], 0.5f);
  kopt::HybridOptimizer whole(group(900, 0), options);
  whole.step();
  EXPECT_NE(p[0], 0.5f);
  kopt_test::TempDir dir;
  whole.save(dir.str("ckpt"));
  kopt::HybridOptimizer again(group(900, 0), options);
  EXPECT_NO_THROW(again.load(dir.str("ckpt")));
  EXPECT_EQ(again.step_count("s"), 1);
}

TEST(ShardedOptimizer, BadShardingOptionsAreRefused) {
  std::vector<float> p(4), g(4);
  kopt::ParamGroup group;
  group.add("w", kopt::Tensor::from(p.data(), 4), kopt::Tensor::from(g.data(), 4));
  kopt::ParamGroup pre;  // a shard of a larger tensor needs a world to sum its norm with
  pre.add("w", kopt::Tensor::from(p.data(), 4).shard_of(8, 4), kopt::Tensor::from(g.data(), 4));
  EXPECT_THROW(kopt::HybridOptimizer({pre}), kopt::InvalidArgument);
  kopt::HybridOptions options;
  options.sharding = kopt::ShardingOptions{};  // no communicator
  EXPECT_THROW(kopt::HybridOptimizer({group}, options), kopt::InvalidArgument);
  options.sharding->communicator = std::make_shared<kopt::SingleProcessCommunicator>();
  options.sharding->stage = static_cast<kopt::ZeroStage>(3);
  EXPECT_THROW(kopt::HybridOptimizer({group}, options), kopt::InvalidArgument);
  options.sharding->stage = kopt::ZeroStage::one;
  kopt::HybridOptimizer opt({group}, options);
  EXPECT_THROW(opt.set_grad("w", kopt::Tensor::from(g.data(), 3)), kopt::ShapeMismatch);
  EXPECT_THROW(opt.rebind("w", kopt::Tensor::from(p.data(), 3), kopt::Tensor{}),
               kopt::ShapeMismatch);
}

}  // namespace test_shard_layout
}  // namespace
