// SGD with momentum, Lion, Adagrad, LAMB, Muon and Adafactor sharded over MPI (ZeRO-1 and ZeRO-2):
// params and state bitwise those of one process stepping the same data, at the world size this runs
// with (CTest: 1, 2, 3 and 4 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <kopt/impl/update_kernel.hpp>
#include <memory>

#include "../algorithm_world.hpp"
#include "shared_dir.hpp"
#include "world.hpp"

namespace {
namespace test_algorithms_mpi {

using kopt::DType;
using kopt_test::AlgorithmWorld;
using kopt_test::ParamDef;
using kopt_test::sharded;
using kopt_test::world_rank;
using kopt_test::world_size;

// Two groups of each algorithm (group 1 offloaded in every run).
std::vector<std::vector<kopt::AlgorithmConfig>> algorithms() {
  return {
      {kopt::SgdConfig{.lr = 0.05, .momentum = 0.9, .nesterov = true},
       kopt::SgdConfig{.lr = 0.1, .momentum = 0.5, .dampening = 0.2, .weight_decay = 0.01}},
      {kopt::LionConfig{.lr = 1e-3, .weight_decay = 0.1},
       kopt::LionConfig{.lr = 3e-4, .beta1 = 0.95, .beta2 = 0.98, .maximize = true}},
      {kopt::AdagradConfig{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1},
       kopt::AdagradConfig{.weight_decay = 0.05, .eps = 1e-6, .maximize = true}},
  };
}

// f32, bf16 and f16 params of sizes that do not divide evenly, plus one smaller than a
// shard (at 3-4 ranks some ranks hold no piece of group 1's last params).
std::vector<ParamDef> defs(DType grad_override = DType::i32) {
  std::vector<ParamDef> d = kopt_test::mixed_defs(2);
  d.push_back(ParamDef{1, DType::bf16, DType::bf16, false, 3});
  d.push_back(ParamDef{1, DType::f32, DType::f32, false, 1});
  if (grad_override != DType::i32)
    for (ParamDef& x : d) x.grad = grad_override;
  return d;
}

// Params, step counts and every state array and master, bitwise.
void expect_same(AlgorithmWorld& one, AlgorithmWorld& zero) {
  for (std::size_t j = 0; j < one.defs.size(); ++j) {
    EXPECT_EQ(one.params[j].get(), zero.params[j].get()) << one.name(j);
    EXPECT_EQ(one.opt->step_count(one.name(j)), zero.opt->step_count(zero.name(j)));
  }
  const kopt_test::SharedDir shared;  // the sharded save is collective: one directory
  zero.opt->save(shared.path);
  const auto state_zero = kopt_test::saved_params(shared.path);
  const auto state_one = kopt_test::saved_params(*one.opt);  // this rank's own directory
  ASSERT_EQ(state_one.size(), one.defs.size());
  for (const auto& [name, s] : state_one) {
    ASSERT_TRUE(state_zero.count(name)) << name;
    EXPECT_TRUE(s == state_zero.at(name)) << name << ": state differs";
  }
}

std::string describe(const std::vector<kopt::AlgorithmConfig>& configs) {
  return std::string(kopt::algorithm_name(configs[0])) + " at " + std::to_string(world_size()) +
         " ranks";
}

// Every rank has the whole grads; each updates its shard and the params are all-gathered.
// With clipping: the global norm has the same bits whatever the world size.
TEST(AlgorithmsZero1, ShardedRunsMatchOneProcessBitwise) {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;  // the norm (~ 80) is clipped
  for (const auto& configs : algorithms()) {
    SCOPED_TRACE(describe(configs));
    AlgorithmWorld one(configs, defs(), options, 21, {false, true});
    AlgorithmWorld zero(configs, defs(), sharded(options, kopt::ZeroStage::one), 21, {false, true});
    for (int s = 0; s < 8; ++s) {
      one.set_grads(s);
      zero.set_grads(s);
      const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
      EXPECT_EQ(a.grad_norm, b.grad_norm);
      EXPECT_LT(b.clip_factor, 1.0);
    }
    expect_same(one, zero);
  }
}

// Per rank, grads of small multiples of 1/128: their sum over ranks is exact in any order,
// so one process given the sum sees bitwise what ZeRO-2's reduce-scatter produces.
// Rank r's grads of step `step` (or, with `sum`, every rank's summed), each k/128 for k in
// [-100, 100]; `spread` scales runs of 64 elements by powers of two from 1 to 2^-11, so that
// blocks of 256 elements cut at other offsets have other largest magnitudes (q8 scales).
std::vector<std::vector<double>> rank_grads(const std::vector<ParamDef>& d, int step, bool sum,
                                            bool spread = false) {
  std::vector<std::vector<double>> out;
  for (const ParamDef& p : d) out.emplace_back(p.n, 0.0);
  for (int r = 0; r < world_size(); ++r) {
    std::mt19937 rng(static_cast<unsigned>(1000 * step + r));
    std::uniform_int_distribution<int> k(-100, 100);
    for (std::size_t j = 0; j < d.size(); ++j)
      for (std::size_t i = 0; i < d[j].n; ++i) {
        const double g = std::ldexp(k(rng) / 128.0, spread ? -static_cast<int>(i / 64 % 12) : 0);
        if (sum || r == world_rank()) out[j][i] += g;
      }
  }
  return out;
}

// Step s of both runs: every rank the whole grads (ZeRO-1), or this rank its share of them
// and the one process their sum (ZeRO-2, whose grads are then f32); the global norms agree
// bitwise.
void step_both(AlgorithmWorld& one, AlgorithmWorld& zero, int s, bool two, bool spread = false) {
  if (two || spread) {  // (ZeRO-1 with `spread`: every rank the sum)
    const auto mine = rank_grads(zero.defs, s, !two, spread),
               all = rank_grads(zero.defs, s, true, spread);
    for (std::size_t j = 0; j < zero.defs.size(); ++j) {
      zero.grads[j].set(mine[j]);
      one.grads[j].set(all[j]);
    }
  } else {
    one.set_grads(s);
    zero.set_grads(s);
  }
  const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
  EXPECT_EQ(a.grad_norm, b.grad_norm);
}

TEST(AlgorithmsZero2, ReduceScatteredRunsMatchOneProcessBitwise) {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  for (const auto& configs : algorithms()) {
    SCOPED_TRACE(describe(configs));
    // ZeRO-2 reduces in f32: the one process gets f32 grads.
    AlgorithmWorld one(configs, defs(DType::f32), options, 23, {false, true});
    AlgorithmWorld zero(configs, defs(), sharded(options, kopt::ZeroStage::two), 23, {false, true});
    for (int s = 0; s < 6; ++s) {
      const auto mine = rank_grads(zero.defs, s, false), all = rank_grads(zero.defs, s, true);
      for (std::size_t j = 0; j < zero.defs.size(); ++j) {
        zero.grads[j].set(mine[j]);
        one.grads[j].set(all[j]);
      }
      const kopt::StepStats a = one.opt->step(), b = zero.opt->step();
      EXPECT_EQ(a.grad_norm, b.grad_norm);
      EXPECT_LT(b.clip_factor, 1.0);
    }
    expect_same(one, zero);
  }
}

// LAMB sharded (ZeRO-1 and ZeRO-2, no group offloaded: LAMB's are not): a param's trust
// ratio needs its norms over every piece, on whatever ranks they sit; every rank gathers
// every rank's exact sums and joins them, so params and state are bitwise those of one
// process at every world size (and the pieces' ratios are one ratio per param).
TEST(LambZero, ShardedRunsMatchOneProcessBitwise) {
  const std::vector<kopt::AlgorithmConfig> configs = {
      kopt::LambConfig{.lr = 1e-2},
      kopt::LambConfig{.lr = 5e-3, .weight_decay = 0.1, .clamp_trust = true, .min_trust = 0.5}};
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
    const bool two = stage == kopt::ZeroStage::two;
    SCOPED_TRACE(std::string(two ? "ZeRO-2" : "ZeRO-1") + " at " + std::to_string(world_size()) +
                 " ranks");
    AlgorithmWorld one(configs, defs(two ? DType::f32 : DType::i32), options, 25);
    AlgorithmWorld zero(configs, defs(), sharded(options, stage), 25);
    for (int s = 0; s < 6; ++s) step_both(one, zero, s, two);
    expect_same(one, zero);
  }
}

// Groups that keep each param whole (Muon, Adafactor) sharded (ZeRO-1 and ZeRO-2) beside
// AdamW: each such param is owned whole by one rank (ShardLayout::whole_params), its state on
// that rank only, the updated param all-gathered. Params and state bitwise those of one
// process at every world size; the sharded checkpoint then loads into one process (the
// params whole on it) and both resume bitwise.
void check_whole_params_sharded(const std::vector<kopt::AlgorithmConfig>& configs) {
  std::vector<ParamDef> d = kopt_test::mixed_defs(3);  // 1, 13, 1000, 8199 elements
  d.push_back(ParamDef{0, DType::bf16, DType::bf16, false, 21});
  d.push_back(ParamDef{2, DType::f32, DType::f32, false, 512});
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
    const bool two = stage == kopt::ZeroStage::two;
    SCOPED_TRACE(std::string(two ? "ZeRO-2" : "ZeRO-1") + " at " + std::to_string(world_size()) +
                 " ranks");
    std::vector<ParamDef> one_defs = d;
    if (two)  // ZeRO-2 reduces in f32: the one process gets f32 grads
      for (ParamDef& x : one_defs) x.grad = DType::f32;
    AlgorithmWorld one(configs, one_defs, options, 27);
    AlgorithmWorld zero(configs, d, sharded(options, stage), 27);
    for (int s = 0; s < 4; ++s) step_both(one, zero, s, two);
    expect_same(one, zero);
    const kopt_test::SharedDir shared;
    zero.opt->save(shared.path);
    AlgorithmWorld alone(configs, one_defs, options, 27);
    for (std::size_t j = 0; j < d.size(); ++j) alone.params[j].set(zero.params[j].get());
    alone.opt->load(shared.path);
    for (int s = 4; s < 7; ++s) {
      step_both(one, zero, s, two);
      for (std::size_t j = 0; j < d.size(); ++j) alone.grads[j].set(one.grads[j].get());
      alone.opt->step();
    }
    expect_same(one, zero);
    for (std::size_t j = 0; j < d.size(); ++j)
      EXPECT_EQ(alone.params[j].get(), one.params[j].get()) << one.name(j);
  }
}

TEST(MuonZero, ShardedRunsMatchOneProcessBitwiseAndTheCheckpointLoadsUnsharded) {
  check_whole_params_sharded(
      {kopt::MuonConfig{.lr = 2e-2}, kopt::AdamConfig{.lr = 1e-3},
       kopt::MuonConfig{.lr = 1e-2, .nesterov = false, .match_rms_adamw = true}});
}

// Adafactor's factored statistics (rows + cols floats per matrix, a vector's variance) live
// with the param's owner and travel in the checkpoint with it.
TEST(AdafactorZero, ShardedRunsMatchOneProcessBitwiseAndTheCheckpointLoadsUnsharded) {
  check_whole_params_sharded(
      {kopt::AdafactorConfig{.lr = 2e-2, .weight_decay = 0.01}, kopt::AdamConfig{.lr = 1e-3},
       kopt::AdafactorConfig{.beta2_decay = -0.5, .d = 2.0, .maximize = true}});
}

// Masters kept as remainders (MasterStorage::remainder), alone and beside bf16 state arrays,
// sharded: each rank keeps the remainders and arrays of its shard beside its piece of the
// bf16 params; params and state (widened, the masters joined) bitwise those of one process.
// With fp32 arrays the masters are those of fp32 masters too.
TEST(RemainderZero1, ShardedRemainderRunsMatchOneProcessBitwise) {
  const std::vector<ParamDef> d = {{0, DType::bf16, DType::bf16, false, 1000},
                                   {0, DType::bf16, DType::f32, false, 8199},
                                   {0, DType::bf16, DType::f16, false, 13},
                                   {0, DType::bf16, DType::bf16, false, 3},
                                   {0, DType::f32, DType::f32, false, 1}};
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  // fp32 arrays, bf16 arrays, and an f16 first array beside fp32 others (per-array dtypes).
  for (const kopt::StateStorage form :
       {kopt::StateStorage{.master = kopt::MasterStorage::remainder},
        kopt::StateStorage{.master = kopt::MasterStorage::remainder, .arrays = DType::bf16},
        kopt::StateStorage{.master = kopt::MasterStorage::remainder, .array_dtypes = {DType::f16}}})
    for (const kopt::AlgorithmConfig& config :
         {kopt::AlgorithmConfig(kopt::AdamConfig{.lr = 1e-3}),
          kopt::AlgorithmConfig(kopt::SgdConfig{.lr = 0.05, .momentum = 0.9})}) {
      SCOPED_TRACE(describe({config}) + ", state " + kopt::name_of(form.dtype_of(0)) + "/" +
                   kopt::name_of(form.dtype_of(1)));
      const std::vector<kopt::StateStorage> storage = {form};
      AlgorithmWorld one({config}, d, options, 25, {}, storage);
      AlgorithmWorld zero({config}, d, sharded(options, kopt::ZeroStage::one), 25, {}, storage);
      AlgorithmWorld fp32_masters({config}, d, options, 25);
      for (int s = 0; s < 8; ++s)
        for (AlgorithmWorld* w : {&one, &zero, &fp32_masters}) {
          w->set_grads(s);
          w->opt->step();
        }
      expect_same(one, zero);
      if (!form.wide()) continue;
      const auto a = kopt_test::saved_params(*one.opt);
      const auto b = kopt_test::saved_params(*fp32_masters.opt);
      for (const auto& [name, s] : a) EXPECT_TRUE(s == b.at(name)) << name << ": masters differ";
    }
}

// No masters (MasterStorage::none), rounded to nearest and stochastically: the random bits
// derive from (seed, step, name, global element index) alone, so ZeRO-1 and ZeRO-2 at any
// world size give the params and state of one process bitwise. (ZeRO-2 as above: each rank
// its own grads, reduced in f32; the one process gets their f32 sums.)
TEST(NoMasterZero, ShardedRunsWithoutMastersMatchOneProcessBitwise) {
  std::vector<ParamDef> d = {{0, DType::bf16, DType::bf16, false, 1000},
                             {0, DType::bf16, DType::f32, false, 8199},
                             {0, DType::bf16, DType::bf16, false, 3},
                             {0, DType::f32, DType::f32, false, 1}};
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  for (const kopt::Rounding rounding : {kopt::Rounding::nearest, kopt::Rounding::stochastic})
    for (const DType arrays : {DType::f32, DType::bf16, DType::q8})
      for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
        const bool two = stage == kopt::ZeroStage::two;
        SCOPED_TRACE(std::string(kopt::name_of(rounding)) + ", " + kopt::name_of(arrays) +
                     " state" + (two ? ", ZeRO-2" : ", ZeRO-1"));
        const kopt::AlgorithmConfig config = kopt::AdamConfig{.lr = 1e-3};
        const std::uint64_t seed = rounding == kopt::Rounding::stochastic ? 7 : 0;
        // Stochastic with bf16 or q8 state: the arrays rounded stochastically too (their bits
        // keyed by each element's index in the whole tensor, whatever the shard).
        const bool state = rounding == kopt::Rounding::stochastic && arrays != DType::f32;
        const std::vector<kopt::StateStorage> storage = {
            {.master = kopt::MasterStorage::none,
             .arrays = arrays,
             .rounding = rounding,
             .seed = seed,
             .state_rounding = state ? kopt::Rounding::stochastic : kopt::Rounding::nearest}};
        std::vector<ParamDef> summed = d;
        for (ParamDef& p : summed) p.grad = two ? DType::f32 : p.grad;
        AlgorithmWorld one({config}, summed, options, 26, {}, storage);
        AlgorithmWorld zero({config}, d, sharded(options, stage), 26, {}, storage);
        for (int s = 0; s < 8; ++s) {
          if (two) {
            const auto mine = rank_grads(d, s, false), all = rank_grads(d, s, true);
            for (std::size_t j = 0; j < d.size(); ++j) {
              zero.grads[j].set(mine[j]);
              one.grads[j].set(all[j]);
            }
          } else {
            one.set_grads(s);
            zero.set_grads(s);
          }
          one.opt->step();
          zero.opt->step();
        }
        expect_same(one, zero);
      }
}

// The device path (teams striding through each chunk, run here on the host: see
// test_team_paths.cpp) on shards: a shard's elements start at first_index > 0 of their
// tensor, which the stochastic rounding bits and the remainders key on. Sharded steps on the
// team path give one process's host-path params and state bitwise.
TEST(NoMasterZero, ShardedTeamPathStepsMatchOneProcessOnTheHostPath) {
  const std::vector<ParamDef> d = {{0, DType::bf16, DType::bf16, false, 8199},
                                   {0, DType::bf16, DType::f32, false, 13},
                                   {1, DType::bf16, DType::bf16, false, 4097},
                                   {1, DType::bf16, DType::f16, false, 65}};
  const std::vector<kopt::AlgorithmConfig> configs = {kopt::AdamConfig{.lr = 1e-3},
                                                      kopt::AdamConfig{.lr = 1e-3}};
  const std::vector<kopt::StateStorage> storage = {
      {.master = kopt::MasterStorage::none,
       .arrays = DType::bf16,
       .rounding = kopt::Rounding::stochastic,
       .seed = 11},
      {.master = kopt::MasterStorage::remainder,  // f16 arrays rounded stochastically
       .arrays = DType::f16,
       .seed = 12,
       .state_rounding = kopt::Rounding::stochastic}};
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  AlgorithmWorld one(configs, d, options, 29, {}, storage);
  AlgorithmWorld zero(configs, d, sharded(options, kopt::ZeroStage::one), 29, {}, storage);
  for (int s = 0; s < 6; ++s) {
    one.set_grads(s);
    zero.set_grads(s);
    one.opt->step();
    const kopt::Impl::ScopedTeamPaths teams;
    zero.opt->step();
  }
  expect_same(one, zero);
}

// q8 groups lay their shards out on whole blocks (ShardLayout's align = q8_block): a block's
// scale then comes from the same 256 elements at every world size. Offloaded groups keep
// remainders or no masters on the host. Each form's ZeRO-1 and ZeRO-2 runs are bitwise one
// process's at every rank count, and a sharded checkpoint resumes bitwise.
TEST(NarrowFormsZero, ShardedRunsAreBitwiseOneProcessAndResumeBitwise) {
  const std::vector<ParamDef> d = {{0, DType::bf16, DType::bf16, false, 1000},
                                   {0, DType::bf16, DType::f32, false, 8199},
                                   {0, DType::bf16, DType::bf16, false, 3},
                                   {0, DType::f32, DType::f32, false, 513}};
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  options.offload.chunk_elements = 768;  // whole q8 blocks; params span pipeline chunks
  struct Case {
    const char* name;
    kopt::StateStorage storage;
    bool offloaded;
  };
  const Case cases[] = {
      {"q8 moments", {.master = kopt::MasterStorage::remainder, .arrays = DType::q8}, false},
      {"offloaded remainders, q8 moments",
       {.master = kopt::MasterStorage::remainder, .arrays = DType::q8},
       true},
      {"offloaded, no masters, stochastic",
       {.master = kopt::MasterStorage::none,
        .arrays = DType::bf16,
        .rounding = kopt::Rounding::stochastic,
        .seed = 3},
       true}};
  const kopt::AlgorithmConfig adamw = kopt::AdamConfig{.lr = 1e-3};
  for (const Case& c : cases)
    for (const kopt::ZeroStage stage : {kopt::ZeroStage::one, kopt::ZeroStage::two}) {
      const bool two = stage == kopt::ZeroStage::two;
      SCOPED_TRACE(std::string(c.name) + (two ? ", ZeRO-2" : ", ZeRO-1") + " at " +
                   std::to_string(world_size()) + " ranks");
      std::vector<ParamDef> one_defs = d;
      if (two)  // ZeRO-2 reduces in f32: the one process gets f32 grads
        for (ParamDef& x : one_defs) x.grad = DType::f32;
      const auto world = [&](const std::vector<ParamDef>& defs, const kopt::HybridOptions& o) {
        return std::make_unique<AlgorithmWorld>(std::vector<kopt::AlgorithmConfig>{adamw}, defs, o,
                                                28, std::vector<bool>{c.offloaded},
                                                std::vector<kopt::StateStorage>{c.storage});
      };
      auto one = world(one_defs, options), zero = world(d, sharded(options, stage));
      ASSERT_EQ(one->opt->is_offloaded(one->name(0)), c.offloaded);
      for (int s = 0; s < 8; ++s) step_both(*one, *zero, s, two, true);
      expect_same(*one, *zero);
      const kopt_test::SharedDir shared;
      zero->opt->save(shared.path);
      auto resumed = world(d, sharded(options, stage));
      for (std::size_t j = 0; j < d.size(); ++j) resumed->params[j].set(zero->params[j].get());
      resumed->opt->load(shared.path);
      for (int s = 8; s < 12; ++s) {
        step_both(*one, *zero, s, two, true);
        for (std::size_t j = 0; j < d.size(); ++j) resumed->grads[j].set(zero->grads[j].get());
        resumed->opt->step();
      }
      expect_same(*one, *zero);
      for (std::size_t j = 0; j < d.size(); ++j)
        EXPECT_EQ(resumed->params[j].get(), zero->params[j].get()) << zero->name(j);
    }
}

}  // namespace test_algorithms_mpi
}  // namespace
