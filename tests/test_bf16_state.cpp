// bf16 state arrays (StateStorage::arrays = bf16): the math runs in fp32 and only storage
// narrows. Every step of every algorithm is checked against a double-precision reference
// started from the state kopt stored (widened), its new state rounded to bf16 the same way;
// checkpoints, sharding and save/load keep the bits; 2 bytes per array and element.
#include <cmath>
#include <cstring>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <memory>
#include <random>

#include "algorithm_world.hpp"
#include "reference_steps.hpp"
#include "rounded_state_check.hpp"
#include "test_support.hpp"

namespace {
namespace test_bf16_state {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;

kopt::StateStorage bf16_state(MasterStorage master) {
  return {.master = master, .arrays = DType::bf16};
}

template <class Space>
class Bf16State : public ::testing::Test {};
TYPED_TEST_SUITE(Bf16State, EnabledSpaces, SpaceName);

// (s: the arrays; a reference of the algorithm is started from them at step t - 1.)
TYPED_TEST(Bf16State, AdamStepsMatchTheRoundedReference) {
  using Space = TypeParam;
  for (const kopt::AdamConfig c :
       {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
        kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.1, .decoupled = false, .amsgrad = true}}) {
    SCOPED_TRACE(c.amsgrad ? "amsgrad" : "adamw");
    const ReferenceStep step = adam_step(c);
    expect_steps_round_state<Space, kopt::Impl::AdamPolicy, float>(
        c, bf16_state(MasterStorage::f32), step);
    expect_steps_round_state<Space, kopt::Impl::AdamPolicy, kopt::bfloat16>(
        c, bf16_state(MasterStorage::f32), step);
    expect_steps_round_state<Space, kopt::Impl::AdamPolicy, kopt::bfloat16>(
        c, bf16_state(MasterStorage::remainder), step);
  }
}

TYPED_TEST(Bf16State, SgdLionAndAdagradStepsMatchTheRoundedReference) {
  using Space = TypeParam;
  using kopt::bfloat16;
  const kopt::SgdConfig sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  expect_steps_round_state<Space, kopt::Impl::SgdPolicy, float>(sgd, bf16_state(MasterStorage::f32),
                                                                sgd_step(sgd));
  expect_steps_round_state<Space, kopt::Impl::SgdPolicy, bfloat16>(
      sgd, bf16_state(MasterStorage::remainder), sgd_step(sgd));

  const kopt::AdagradConfig adagrad{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1};
  expect_steps_round_state<Space, kopt::Impl::AdagradPolicy, float>(
      adagrad, bf16_state(MasterStorage::f32), adagrad_step(adagrad));
  expect_steps_round_state<Space, kopt::Impl::AdagradPolicy, bfloat16>(
      adagrad, bf16_state(MasterStorage::remainder), adagrad_step(adagrad));

  const kopt::LionConfig lion{.lr = 1e-3, .weight_decay = 0.1};
  expect_steps_round_state<Space, kopt::Impl::LionPolicy, float>(
      lion, bf16_state(MasterStorage::f32), lion_step(lion));
  expect_steps_round_state<Space, kopt::Impl::LionPolicy, bfloat16>(
      lion, bf16_state(MasterStorage::remainder), lion_step(lion));
}

// Through the optimizer: group 0 keeps bf16 params' masters as remainders beside bf16
// arrays (AdamW's 18-byte step), group 1 fp32 masters beside bf16 arrays.
const std::vector<kopt::StateStorage> kBf16Storage = {
    {.master = MasterStorage::remainder, .arrays = DType::bf16},
    {.master = MasterStorage::f32, .arrays = DType::bf16}};

std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, true, 1000},
          {0, DType::f32, DType::f32, true, 8199},
          {1, DType::bf16, DType::f32, true, 17},
          {1, DType::f16, DType::f16, true, 13}};
}

kopt::HybridOptions clipped() {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  return options;
}

std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2}, kopt::SgdConfig{.lr = 0.05, .momentum = 0.9}};
}

// A save resumes bitwise, with the weights written before or after load().
TEST(Bf16StateOptimizer, SaveAndLoadResumeBitwise) {
  expect_resumes_bitwise(
      [] { return AlgorithmWorld(configs(), defs(), clipped(), 8, {}, kBf16Storage); });
}

// The file holds the bf16 arrays widened: a group of fp32 arrays loads them exactly (its
// own save writes the same state); a file of fp32 arrays loads into bf16 arrays rounded to
// nearest even. The masters load exactly across both forms (weights written before or after).
TEST(Bf16StateOptimizer, CheckpointsLoadAcrossStateDtypes) {
  TempDir dir;
  AlgorithmWorld narrow(configs(), defs(), clipped(), 9, {}, kBf16Storage);
  AlgorithmWorld wide(configs(), defs(), clipped(), 9);
  narrow.train(0, 5);
  wide.train(0, 5);
  narrow.opt->save(dir.str("narrow"));
  wide.opt->save(dir.str("wide"));
  const auto narrow_state = saved_params(dir.str("narrow"));
  const auto wide_state = saved_params(dir.str("wide"));

  AlgorithmWorld into_wide(configs(), defs(), clipped(), 9);
  for (std::size_t j = 0; j < defs().size(); ++j) into_wide.params[j].set(narrow.params[j].get());
  into_wide.opt->load(dir.str("narrow"));
  EXPECT_TRUE(saved_params(*into_wide.opt) == narrow_state) << "widened state changed";

  AlgorithmWorld into_narrow(configs(), defs(), clipped(), 9, {}, kBf16Storage);
  into_narrow.opt->load(dir.str("wide"));
  for (std::size_t j = 0; j < defs().size(); ++j) into_narrow.params[j].set(wide.params[j].get());
  std::size_t inexact = 0;
  for (const auto& [name, s] : saved_params(*into_narrow.opt)) {
    const SavedParam& w = wide_state.at(name);
    ASSERT_EQ(s.values.size(), w.values.size()) << name;
    const std::size_t arrays = static_cast<std::size_t>(std::popcount(w.arrays));
    for (std::size_t k = 0; k < w.values.size(); ++k)
      for (std::size_t i = 0; i < w.values[k].size(); ++i) {
        const std::uint32_t expected =
            k < arrays ? bits_of(kopt::bfloat16::from_float(float_of(w.values[k][i])).to_float())
                       : w.values[k][i];  // the master: exact
        ASSERT_EQ(s.values[k][i], expected) << name << " array " << k << " [" << i << "]";
        inexact += s.values[k][i] != w.values[k][i];
      }
  }
  EXPECT_GT(inexact, 0u) << "fp32 state that bf16 holds exactly tells nothing";
}

// Offloaded groups (StatePlacement::host) keep bf16 arrays on the host beside their fp32
// masters: the same kernel on the same floats, so params and state bitwise those of the
// same groups kept beside their params; 2 bytes per array element on the host.
TEST(Bf16StateOptimizer, OffloadedGroupsStepLikeLocalOnesBitwise) {
  const std::vector<kopt::StateStorage> narrow = {{.arrays = DType::bf16}, {.arrays = DType::bf16}};
  AlgorithmWorld local(configs(), defs(), clipped(), 10, {}, narrow);
  AlgorithmWorld offloaded(configs(), defs(), clipped(), 10, {true, true}, narrow);
  AlgorithmWorld wide(configs(), defs(), clipped(), 10, {true, true});
  for (AlgorithmWorld* w : {&local, &offloaded, &wide}) w->train(0, 12);
  EXPECT_EQ(offloaded.all_params(), local.all_params());
  EXPECT_TRUE(saved_params(*offloaded.opt) == saved_params(*local.opt)) << "state differs";
  const auto bytes = [](AlgorithmWorld& w) {
    std::size_t b = 0;
    for (const auto& [space, n] : w.opt->state_bytes()) b += n;
    return b;
  };
  // Host masters of every param (4 B; f32 params' host copies too), padded to 16 elements:
  // 1008 + 8208 + 32 + 16; Adam's 2 arrays over the first two, SGD momentum's 1 over the rest.
  const std::size_t masters = 4 * (1008u + 8208u + 32u + 16u),
                    elements = 2 * (1008u + 8208u) + 32u + 16u;
  EXPECT_EQ(bytes(offloaded), masters + 2 * elements);
  EXPECT_EQ(bytes(wide), masters + 4 * elements);
}

// 2 bytes per state array element; remainders 2 per bf16 master.
TEST(Bf16StateOptimizer, StateBytesCountTwoBytesPerArrayElement) {
  AlgorithmWorld w(
      {kopt::AdamConfig{}},
      {{0, DType::bf16, DType::bf16, true, 1000}, {0, DType::f32, DType::f32, true, 8199}}, {}, 3,
      {}, {kBf16Storage[0]});
  w.train(0, 1);
  std::size_t bytes = 0;
  for (const auto& [space, b] : w.opt->state_bytes()) bytes += b;
  EXPECT_EQ(bytes, (2 + 2 + 2) * 1008u + (2 + 2) * 8208u);
}

TEST(Bf16StateOptimizer, BadInputIsRefusedNamingIt) {
  kopt::ParamGroup group;
  expect_error<kopt::InvalidArgument>([&] { group.set_state_dtype(DType::f64); },
                                      "StateStorage.arrays = f64 is not a state dtype kopt "
                                      "stores: f32, bf16, f16 or q8");
  EXPECT_EQ(group.storage(), kopt::StateStorage{});
  using Opt = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::AdamPolicy>;
  expect_error<kopt::InvalidArgument>(
      [&] { Opt opt(Kokkos::DefaultHostExecutionSpace(), {}, "engine", {.arrays = DType::i32}); },
      "StateStorage.arrays = i32");
}

}  // namespace test_bf16_state
}  // namespace
