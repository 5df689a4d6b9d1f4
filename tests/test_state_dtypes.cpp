// Per-array state dtypes (StateStorage::array_dtypes, ParamGroup::set_state_dtype(name, ..))
// and f16 arrays: each array is stored in its own dtype (f32, bf16, f16) and the math runs
// in fp32. Every step is checked against a double reference rounded per array; the
// optimizer counts each array at its dtype, saves and resumes bitwise, loads files across
// dtypes (rounded to nearest even), offloads them, and refuses bad input naming it.
#include <bit>
#include <cstring>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <map>
#include <optional>

#include "algorithm_world.hpp"
#include "reference_steps.hpp"
#include "rounded_state_check.hpp"
#include "test_support.hpp"

namespace {
namespace test_state_dtypes {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;
using Dtypes = std::array<std::optional<DType>, kopt::max_state_arrays>;

kopt::StateStorage storage(MasterStorage master, DType all, const Dtypes& per_array = {}) {
  return {.master = master, .arrays = all, .array_dtypes = per_array};
}

template <class Space>
class StateDtypes : public ::testing::Test {};
TYPED_TEST_SUITE(StateDtypes, EnabledSpaces, SpaceName);

// Adam's moments in every mix the kernel could get wrong: all f16; bf16 m beside f32 v
// (and an f16 max for amsgrad); f16 m beside bf16 v; under f32 masters and remainders, with
// f32, bf16 and f16 params.
TYPED_TEST(StateDtypes, AdamStepsMatchTheReferenceRoundedPerArray) {
  using Space = TypeParam;
  using kopt::Impl::AdamPolicy;
  for (const kopt::AdamConfig c :
       {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
        kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.1, .decoupled = false, .amsgrad = true}}) {
    SCOPED_TRACE(c.amsgrad ? "amsgrad" : "adamw");
    const ReferenceStep step = adam_step(c);
    expect_steps_round_state<Space, AdamPolicy, float>(c, storage(MasterStorage::f32, DType::f16),
                                                       step);
    expect_steps_round_state<Space, AdamPolicy, kopt::bfloat16>(
        c, storage(MasterStorage::remainder, DType::f32, {DType::bf16, std::nullopt, DType::f16}),
        step);
    expect_steps_round_state<Space, AdamPolicy, kopt::float16>(
        c, storage(MasterStorage::f32, DType::bf16, {DType::f16}), step);
    expect_steps_round_state<Space, AdamPolicy, kopt::bfloat16>(
        c, storage(MasterStorage::f32, DType::f16, {std::nullopt, DType::f32}), step);
  }
}

TYPED_TEST(StateDtypes, SgdLionAndAdagradStepsMatchTheF16RoundedReference) {
  using Space = TypeParam;
  using namespace kopt::Impl;
  const kopt::StateStorage f16 = storage(MasterStorage::f32, DType::f16);
  const kopt::StateStorage f16_remainder = storage(MasterStorage::remainder, DType::f16);
  const kopt::SgdConfig sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  expect_steps_round_state<Space, SgdPolicy, float>(sgd, f16, sgd_step(sgd));
  expect_steps_round_state<Space, SgdPolicy, kopt::bfloat16>(sgd, f16_remainder, sgd_step(sgd));
  const kopt::AdagradConfig adagrad{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1};
  expect_steps_round_state<Space, AdagradPolicy, kopt::float16>(adagrad, f16,
                                                                adagrad_step(adagrad));
  const kopt::LionConfig lion{.lr = 1e-3, .weight_decay = 0.1};
  expect_steps_round_state<Space, LionPolicy, kopt::bfloat16>(lion, f16_remainder, lion_step(lion));
}

// The staged loop of 16-bit state (blocks of 256 elements) must give every element its own
// param, grad, master and random bits: plain SGD keeps no arrays, so storing them as f16
// (the staged loop) or f32 (the plain one) must give the same params bitwise, under every
// master form, for sizes across block edges.
TYPED_TEST(StateDtypes, StagedLoopStepsEveryElementLikeThePlainLoop) {
  using Space = TypeParam;
  using Opt = kopt::FusedOptimizer<Space, kopt::Impl::SgdPolicy>;
  const std::size_t sizes[] = {1, 255, 257, 10001};
  const kopt::SgdConfig sgd{.lr = 0.01, .weight_decay = 0.01};
  for (const kopt::StateStorage form :
       {kopt::StateStorage{}, kopt::StateStorage{.master = MasterStorage::remainder},
        kopt::StateStorage{.master = MasterStorage::none},
        kopt::StateStorage{
            .master = MasterStorage::none, .rounding = kopt::Rounding::stochastic, .seed = 5}}) {
    SCOPED_TRACE(kopt::name_of(form.master));
    kopt::StateStorage staged = form;
    staged.arrays = DType::f16;
    Opt plain_opt(Space(), sgd, "plain", form), staged_opt(Space(), sgd, "staged", staged);
    std::mt19937 a(3), b(3);
    auto [plain, plain_grads] = add_random_params<kopt::bfloat16, Space>(plain_opt, sizes, a);
    auto [narrow, narrow_grads] = add_random_params<kopt::bfloat16, Space>(staged_opt, sizes, b);
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int t = 0; t < 3; ++t) {
      for (std::size_t j = 0; j < plain.size(); ++j) {
        for (auto& x : plain_grads[j]->host) x = kopt::bfloat16::from_float(dist(rng));
        narrow_grads[j]->host = plain_grads[j]->host;
        plain_grads[j]->upload();
        narrow_grads[j]->upload();
      }
      plain_opt.step();
      staged_opt.step();
    }
    for (std::size_t j = 0; j < plain.size(); ++j) {
      const auto x = plain[j]->download(), y = narrow[j]->download();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < x.size(); ++i) differ += x[i].bits != y[i].bits;
      EXPECT_EQ(differ, 0u) << "p" << j << " of " << x.size();
    }
  }
}

// Through the optimizer, per-array dtypes set by name: AdamW with bf16 exp_avg and f32
// exp_avg_sq over remainders (22 B per bf16 element), SGD momentum in f16.
std::vector<kopt::ParamGroup> mixed_groups() {
  std::vector<kopt::ParamGroup> g;
  g.emplace_back(kopt::AdamConfig{.lr = 1e-2});
  g.back()
      .set_master(MasterStorage::remainder)
      .set_state_dtype(DType::bf16)
      .set_state_dtype("exp_avg_sq", DType::f32);
  g.emplace_back(kopt::SgdConfig{.lr = 0.05, .momentum = 0.9});
  g.back().set_state_dtype(DType::f16);
  return g;
}
const std::vector<kopt::StateStorage> kMixed = {
    storage(MasterStorage::remainder, DType::bf16, {std::nullopt, DType::f32}),
    storage(MasterStorage::f32, DType::f16)};
std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2}, kopt::SgdConfig{.lr = 0.05, .momentum = 0.9}};
}
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

TEST(StateDtypesOptimizer, SetByNameTheGroupsStoreEachArrayInItsDtype) {
  const std::vector<kopt::ParamGroup> g = mixed_groups();
  EXPECT_EQ(g[0].storage(), kMixed[0]);
  EXPECT_EQ(g[1].storage(), kMixed[1]);
  EXPECT_EQ(g[0].storage().dtype_of(0), DType::bf16);
  EXPECT_EQ(g[0].storage().dtype_of(1), DType::f32);
  EXPECT_EQ(g[0].storage().dtype_of(2), DType::bf16);
  AlgorithmWorld w(configs(), defs(), clipped(), 4, {}, kMixed);
  w.train(0, 1);
  // Padded to 16 elements: Adam's bf16 m (2 B) and f32 v (4 B) over p0 and p1, p0's
  // remainder (2 B); SGD's f16 momentum (2 B) over p2 and p3, their fp32 masters (4 B).
  EXPECT_EQ(total_state_bytes(*w.opt),
            (2 + 4) * (1008u + 8208u) + 2 * 1008u + (2 + 4) * (32u + 16u));
}

TEST(StateDtypesOptimizer, SaveAndLoadResumeBitwise) {
  expect_resumes_bitwise(
      [] { return AlgorithmWorld(configs(), defs(), clipped(), 8, {}, kMixed); });
}

// The data files hold each array in its dtype: bf16 exp_avg 2 bytes, f32 exp_avg_sq 4, the
// fp32 master 4 (p0); f16 momentum 2 and the master 4 (p2, p3). Format version 2, whose
// arrays are all fp32, cannot hold them and says so.
TEST(StateDtypesOptimizer, CheckpointsStoreEachArrayInItsDtype) {
  TempDir dir;
  AlgorithmWorld w(configs(), defs(), clipped(), 5, {}, kMixed);
  w.train(0, 2);
  w.opt->save(dir.str("ckpt"));
  namespace I = kopt::Impl;
  const std::string file = dir.str("ckpt") + "/" + I::kIndexName;
  const I::Index index = I::parse_index(I::read_file(file), file);
  const std::map<std::string, std::uint64_t> expected = {
      {"p0", 2 + 4 + 4}, {"p1", 2 + 4}, {"p2", 2 + 4}, {"p3", 2 + 4}};
  for (const I::IndexBlock& b : index.blocks) {
    const I::IndexParam& q = index.params[b.param];
    EXPECT_EQ(b.bytes, expected.at(q.name) * static_cast<std::uint64_t>(b.length)) << q.name;
  }
  expect_error<kopt::CheckpointError>([&] { I::serialize_index(index, 2); },
                                      "format version 2 holds fp32 state only; param 'p0' "
                                      "stores an array of dtype code 1");
}

// A file loads into 16-bit arrays rounded to nearest even in each array's dtype: one of fp32
// arrays, and one of f16 arrays into bf16 ones (and the f16 momentum into f16 exactly); the
// masters exactly.
TEST(StateDtypesOptimizer, CheckpointsLoadRoundedToEachArraysDtype) {
  const std::vector<kopt::StateStorage> f16 = {storage(MasterStorage::f32, DType::f16),
                                               storage(MasterStorage::f32, DType::f16)};
  for (const auto& source : {std::vector<kopt::StateStorage>{}, f16}) {
    SCOPED_TRACE(source.empty() ? "fp32 file" : "f16 file");
    TempDir dir;
    AlgorithmWorld saved(configs(), defs(), clipped(), 9, {}, source);
    saved.train(0, 5);
    saved.opt->save(dir.str("file"));
    const auto file = saved_params(dir.str("file"));
    AlgorithmWorld narrow(configs(), defs(), clipped(), 9, {}, kMixed);
    narrow.opt->load(dir.str("file"));
    for (std::size_t j = 0; j < defs().size(); ++j) narrow.params[j].set(saved.params[j].get());
    std::size_t inexact = 0;
    for (const auto& [name, s] : saved_params(*narrow.opt)) {
      const SavedParam& w = file.at(name);
      const kopt::StateStorage& form = kMixed[name == "p0" || name == "p1" ? 0 : 1];
      ASSERT_EQ(s.values.size(), w.values.size()) << name;
      const std::size_t arrays = static_cast<std::size_t>(std::popcount(w.arrays));
      for (std::size_t k = 0; k < w.values.size(); ++k)
        for (std::size_t i = 0; i < w.values[k].size(); ++i) {
          const float x = float_of(w.values[k][i]);
          const DType d = k < arrays ? form.dtype_of(k) : DType::f32;  // the master: exact
          const float expected = d == DType::bf16  ? kopt::bfloat16::from_float(x).to_float()
                                 : d == DType::f16 ? kopt::float16::from_float(x).to_float()
                                                   : x;
          ASSERT_EQ(s.values[k][i], bits_of(expected))
              << name << " array " << k << " [" << i << "]";
          inexact += s.values[k][i] != w.values[k][i];
        }
    }
    EXPECT_GT(inexact, 0u) << "state that the narrow dtypes hold exactly tells nothing";
  }
}

// Offloaded groups keep each array in its dtype on the host: bitwise the local groups.
TEST(StateDtypesOptimizer, OffloadedGroupsStepLikeLocalOnesBitwise) {
  const std::vector<kopt::StateStorage> host = {
      storage(MasterStorage::f32, DType::bf16, {std::nullopt, DType::f32}),
      storage(MasterStorage::f32, DType::f16)};
  AlgorithmWorld local(configs(), defs(), clipped(), 10, {}, host);
  AlgorithmWorld offloaded(configs(), defs(), clipped(), 10, {true, true}, host);
  for (AlgorithmWorld* w : {&local, &offloaded}) w->train(0, 12);
  EXPECT_EQ(offloaded.all_params(), local.all_params());
  EXPECT_TRUE(saved_params(*offloaded.opt) == saved_params(*local.opt)) << "state differs";
  // Host masters of every param (4 B), Adam's bf16 m and f32 v, SGD's f16 momentum.
  EXPECT_EQ(total_state_bytes(*offloaded.opt),
            4 * (1008u + 8208u + 32u + 16u) + (2 + 4) * (1008u + 8208u) + 2 * (32u + 16u));
}

TEST(StateDtypesOptimizer, BadInputIsRefusedNamingItAndChangesNothing) {
  kopt::ParamGroup adam(kopt::AdamConfig{});
  adam.set_state_dtype(DType::bf16);
  const kopt::StateStorage before = adam.storage();
  expect_error<kopt::InvalidArgument>(
      [&] { adam.set_state_dtype("momentum_buffer", DType::f32); },
      "adam has no state array of that name (its arrays: exp_avg, exp_avg_sq, max_exp_avg_sq)");
  expect_error<kopt::InvalidArgument>([&] { adam.set_state_dtype("exp_avg", DType::i32); },
                                      "StateStorage.array_dtypes[0] = i32 is not a state dtype");
  EXPECT_EQ(adam.storage(), before);
  adam.set_state_dtype("exp_avg_sq", DType::f32);
  expect_error<kopt::InvalidArgument>(
      [&] { adam.set_algorithm(kopt::SgdConfig{}); },
      "the group has per-array state dtypes for adam's arrays; set_state_dtype(dtype) first");
  EXPECT_EQ(adam.algorithm().index(), kopt::AlgorithmConfig(kopt::AdamConfig{}).index());
  adam.set_algorithm(kopt::AdamConfig{.lr = 1.0});  // the same algorithm keeps them
  EXPECT_EQ(adam.storage().dtype_of(1), DType::f32);
  adam.set_state_dtype(DType::f16);  // clears them
  EXPECT_EQ(adam.storage(), storage(MasterStorage::f32, DType::f16));
  adam.set_algorithm(kopt::SgdConfig{});

  using Sgd = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::SgdPolicy>;
  expect_error<kopt::InvalidArgument>(
      [&] {
        Sgd opt(Kokkos::DefaultHostExecutionSpace(), {}, "engine",
                storage(MasterStorage::f32, DType::f32, {std::nullopt, DType::bf16}));
      },
      "StateStorage.array_dtypes[1] is set, but sgd has 1 state arrays");
}

}  // namespace test_state_dtypes
}  // namespace
