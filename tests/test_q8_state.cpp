// Adam's moments in blockwise 8-bit codes (DType::q8, kopt/impl/block_q8.hpp): every step
// against a double reference whose new moments are encoded a block at a time the same way;
// through the optimizer, the bytes it holds, bitwise resumes from checkpoints (which hold
// the decoded values as f32), offloaded groups bitwise the local ones, and bad input
// refused naming it.
#include <gtest/gtest.h>

#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <map>
#include <optional>

#include "algorithm_world.hpp"
#include "reference_steps.hpp"
#include "rounded_state_check.hpp"
#include "test_support.hpp"

namespace {
namespace test_q8_state {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;

kopt::StateStorage q8_storage(MasterStorage master, DType all,
                              std::array<std::optional<DType>, kopt::max_state_arrays> each = {}) {
  return {.master = master, .arrays = all, .array_dtypes = each};
}

template <class Space>
class Q8State : public ::testing::Test {};
TYPED_TEST_SUITE(Q8State, EnabledSpaces, SpaceName);

// All arrays q8 (f32 params); q8 exp_avg beside f32 exp_avg_sq over remainders (bf16
// params); bf16 exp_avg beside q8 exp_avg_sq and max (f16 params, fp32 masters).
TYPED_TEST(Q8State, AdamStepsMatchTheReferenceEncodedPerBlock) {
  using Space = TypeParam;
  using kopt::Impl::AdamPolicy;
  for (const kopt::AdamConfig c :
       {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
        kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.1, .decoupled = false, .amsgrad = true}}) {
    SCOPED_TRACE(c.amsgrad ? "amsgrad" : "adamw");
    const ReferenceStep step = adam_step(c);
    expect_steps_round_state<Space, AdamPolicy, float>(c, q8_storage(MasterStorage::f32, DType::q8),
                                                       step);
    expect_steps_round_state<Space, AdamPolicy, kopt::bfloat16>(
        c, q8_storage(MasterStorage::remainder, DType::f32, {DType::q8}), step);
    expect_steps_round_state<Space, AdamPolicy, kopt::float16>(
        c, q8_storage(MasterStorage::f32, DType::q8, {DType::bf16}), step);
  }
}

// AdamW with q8 moments over remainders (bf16 params: 2 + 1 + 1 bytes per element and a
// scale per block), beside SGD with f32 state.
std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2}, kopt::SgdConfig{.lr = 0.05, .momentum = 0.9}};
}
const std::vector<kopt::StateStorage> kQ8 = {q8_storage(MasterStorage::remainder, DType::q8), {}};
std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, true, 1000},
          {0, DType::f32, DType::f32, true, 8199},
          {0, DType::bf16, DType::f32, true, 256},
          {1, DType::f32, DType::f32, true, 17}};
}
kopt::HybridOptions clipped() {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  return options;
}

TEST(Q8StateOptimizer, StateBytesAreTheBlocksAndTheRemainders) {
  AlgorithmWorld w(configs(), defs(), clipped(), 4, {}, kQ8);
  w.train(0, 1);
  // Adam's params laid out on whole blocks of 256 (1024, 8448, 256 elements): two q8 arrays
  // of 260 bytes per block; remainders of the bf16 params (2 B, padded to 256); SGD's f32
  // momentum (17 elements padded to 16s: 32).
  const std::size_t blocks = (1024 + 8448 + 256) / 256;
  EXPECT_EQ(total_state_bytes(*w.opt), 2 * 260 * blocks + 2 * (1024u + 256u) + 4 * 32u);
}

// Saved and loaded whole, and in spans of 300 elements (q8 arrays are written in whole
// blocks, 256 at a time, and read from the blocks each span overlaps).
TEST(Q8StateOptimizer, SaveAndLoadResumeBitwise) {
  for (const std::int64_t span : {std::int64_t{0}, std::int64_t{300}}) {
    SCOPED_TRACE("spans of " + std::to_string(span) + " (0: whole)");
    kopt::Impl::set_checkpoint_span_floats(span);
    // The loading world has 3 steps of state of its own: the load replaces every block of it.
    expect_resumes_bitwise([] { return AlgorithmWorld(configs(), defs(), clipped(), 8, {}, kQ8); },
                           3);
  }
  kopt::Impl::set_checkpoint_span_floats(0);
}

// A file holds q8 arrays as their codes (260 bytes per block of 256, as the engine keeps
// them); it loads into f32 arrays exactly, and a file of f32 arrays loads into q8 ones as
// each block encodes it.
TEST(Q8StateOptimizer, CheckpointsHoldTheCodesAndLoadAcrossDtypes) {
  TempDir dir;
  AlgorithmWorld q8(configs(), defs(), clipped(), 5, {}, kQ8);
  q8.train(0, 4);
  q8.opt->save(dir.str("q8"));
  namespace I = kopt::Impl;
  const std::string file = dir.str("q8") + "/" + I::kIndexName;
  const I::Index index = I::parse_index(I::read_file(file), file);
  for (const I::IndexParam& q : index.params)  // Adam's arrays q8, SGD's (group 1) f32
    for (const DType d : q.array_dtypes) EXPECT_EQ(d, q.group == 0 ? DType::q8 : DType::f32);
  for (const I::IndexBlock& b : index.blocks) {
    const I::IndexParam& q = index.params[b.param];
    if (q.group != 0) continue;
    // exp_avg and exp_avg_sq in blocks, then the fp32 master of a 16-bit param.
    EXPECT_EQ(b.bytes, static_cast<std::uint64_t>(2 * I::q8_bytes(b.length) +
                                                  (q.has_master ? 4 * b.length : 0)))
        << q.name;
  }
  const auto saved = saved_params(dir.str("q8"));
  // Into f32 arrays: the same values.
  AlgorithmWorld wide(configs(), defs(), clipped(), 5, {},
                      {q8_storage(MasterStorage::remainder, DType::f32), {}});
  wide.opt->load(dir.str("q8"));
  for (std::size_t j = 0; j < defs().size(); ++j) wide.params[j].set(q8.params[j].get());
  EXPECT_TRUE(saved_params(*wide.opt) == saved_params(*q8.opt)) << "f32 arrays differ";
  // An f32 file into q8 arrays: each block of each array encoded (the codec's own test
  // checks the encoding; here, that every value is one of its block's code values, and
  // within half a code step of the file's).
  wide.train(4, 3);
  wide.opt->save(dir.str("wide"));
  const auto file_state = saved_params(dir.str("wide"));
  AlgorithmWorld narrow(configs(), defs(), clipped(), 5, {}, kQ8);
  narrow.opt->load(dir.str("wide"));
  std::size_t inexact = 0;
  for (const auto& [name, s] : saved_params(*narrow.opt)) {
    if (name == "p3") continue;  // SGD, f32
    const SavedParam& w = file_state.at(name);
    for (std::size_t k = 0; k < 2; ++k)
      for (std::size_t i = 0; i < w.values[k].size(); ++i) {
        // Stored values (v's roots) within half a code step: relative, or the subnormal
        // codes' half step below 2^-14 of the block's largest.
        const auto stored = [&](std::uint32_t bits) {
          return k == 0 ? static_cast<double>(float_of(bits)) : std::sqrt(float_of(bits));
        };
        double block_max = 0;
        const std::size_t b = i / 256 * 256;
        for (std::size_t j = b; j < std::min(b + 256, w.values[k].size()); ++j)
          block_max = std::max(block_max, std::abs(stored(w.values[k][j])));
        const double x = stored(w.values[k][i]), y = stored(s.values[k][i]);
        const double half_step = k == 0 ? 1.0 / 16 : 1.0 / 32;
        ASSERT_LE(std::abs(y - x), half_step * 1.0001 * std::abs(x) + 0x1p-17 * block_max)
            << name << " array " << k << " [" << i << "]";
        inexact += s.values[k][i] != w.values[k][i];
      }
  }
  EXPECT_GT(inexact, 0u) << "values the file held that q8 codes hold exactly tell nothing";
  EXPECT_FALSE(saved.empty());
}

// Offloaded groups keep q8 arrays on the host (whole blocks per pipeline piece): bitwise the
// local groups, also with batches that end inside a param.
TEST(Q8StateOptimizer, OffloadedGroupsStepLikeLocalOnesBitwise) {
  const std::vector<kopt::StateStorage> host = {q8_storage(MasterStorage::f32, DType::q8), {}};
  kopt::HybridOptions small_batches = clipped();
  small_batches.offload.chunk_elements = 768;  // three blocks: params span batches
  AlgorithmWorld local(configs(), defs(), clipped(), 10, {}, host);
  AlgorithmWorld offloaded(configs(), defs(), small_batches, 10, {true, true}, host);
  for (AlgorithmWorld* w : {&local, &offloaded}) w->train(0, 12);
  EXPECT_EQ(offloaded.all_params(), local.all_params());
  EXPECT_TRUE(saved_params(*offloaded.opt) == saved_params(*local.opt)) << "state differs";
}

TEST(Q8StateOptimizer, BadInputIsRefusedNamingItAndChangesNothing) {
  kopt::ParamGroup sgd(kopt::SgdConfig{.momentum = 0.9});
  expect_error<kopt::InvalidArgument>(
      [&] { sgd.set_state_dtype(DType::q8); },
      "ParamGroup::set_state_dtype: q8 state arrays are Adam's (adam, AdamW) only; sgd keeps "
      "f32, bf16 or f16 state");
  EXPECT_EQ(sgd.storage(), kopt::StateStorage{});
  kopt::ParamGroup factored(kopt::AdafactorConfig{});  // no arrays: q8 would be a no-op
  expect_error<kopt::InvalidArgument>([&] { factored.set_state_dtype(DType::q8); },
                                      "q8 state arrays are Adam's (adam, AdamW) only; adafactor");
  EXPECT_EQ(factored.storage(), kopt::StateStorage{});
  kopt::ParamGroup adam(kopt::AdamConfig{});
  adam.set_state_dtype("exp_avg", DType::q8);
  expect_error<kopt::InvalidArgument>([&] { adam.set_algorithm(kopt::LionConfig{}); },
                                      "q8 state arrays are Adam's");
  adam.set_state_dtype(DType::q8);
  expect_error<kopt::InvalidArgument>([&] { adam.set_algorithm(kopt::LambConfig{}); },
                                      "ParamGroup::set_algorithm: q8 state arrays are Adam's "
                                      "(adam, AdamW) only; lamb keeps");
  EXPECT_EQ(adam.algorithm().index(), kopt::AlgorithmConfig(kopt::AdamConfig{}).index());
  // A q8 tensor is no param.
  std::vector<unsigned char> bytes(4);
  expect_error<kopt::InvalidArgument>(
      [&] {
        adam.add("w", kopt::Tensor(bytes.data(), 4, DType::q8, kopt::MemorySpace::host),
                 kopt::Tensor(bytes.data(), 4, DType::q8, kopt::MemorySpace::host));
      },
      "param of 'w' has dtype q8, which kopt does not update (f32, bf16, f16)");
  // Engines: an algorithm without q8 state; offload pieces that cannot hold whole blocks.
  using Host = Kokkos::DefaultHostExecutionSpace;
  expect_error<kopt::InvalidArgument>(
      [&] {
        kopt::FusedOptimizer<Host, kopt::Impl::SgdPolicy> opt(Host(), {}, "engine",
                                                              {.arrays = DType::q8});
      },
      "engine: StateStorage stores sgd's momentum_buffer as q8, which only Adam's moments take");
  kopt::ParamGroup offloaded(kopt::AdamConfig{}, kopt::StatePlacement::host);
  offloaded.set_state_dtype(DType::q8);
  std::vector<float> w(10), g(10);
  offloaded.add("w", kopt::Tensor::from(w.data(), 10), kopt::Tensor::from(g.data(), 10));
  kopt::HybridOptions odd;
  odd.offload.chunk_elements = 1000;
  std::vector<kopt::ParamGroup> groups = {offloaded};
  expect_error<kopt::InvalidArgument>(
      [&] { kopt::HybridOptimizer opt(groups, odd); },
      "OffloadOptions.chunk_elements = 1000: q8 state is updated in whole blocks of 256 "
      "elements; use a multiple of 256");
}

}  // namespace test_q8_state
}  // namespace
