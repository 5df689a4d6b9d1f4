// Params cut one after another from one buffer, with their grads likewise, are updated as
// runs (kopt/impl/chunk_runs.hpp): one span of chunks from the first param's slot wherever
// every array continues, and the step scalars and rounding are the same. Against the same
// params each in a buffer of its own (no run joins): bitwise the same params and state, in
// fewer chunks, for every master form, 16-bit and q8 state, Adam, Lion and SGD; never for
// stochastic rounding (keyed per param) or LAMB (a rate per param). A param without a grad
// for a step, and then a step count of its own, splits the runs around it. The same on
// offloaded groups, in one pipeline chunk or in chunks that cut params, against local params
// apart (offload stages every param one after another, so its params apart join runs too).
#include <gtest/gtest.h>

#include <kopt/impl/chunk_runs.hpp>
#include <random>

#include "algorithm_world.hpp"  // saved_params

namespace {
namespace test_chunk_runs {

using kopt::DType;

// Each group's params, in order: 1,024 + 100 elements continue each other in every array;
// the next param starts a new run (state is laid out on multiples of 16 elements, q8 state
// on blocks of 256); a param of no elements between two runs.
const std::vector<std::int64_t> kSizes = {256, 512, 256, 100, 0, 256, 768};

// Where the groups' state lives: beside the params, or offloaded (LAMB's group stays local:
// offload does not run it) in the default pipeline chunk or in chunks of 512 elements, which
// cut params (the runs then stop at each chunk's end).
enum class Placement { local, offloaded, offloaded_cut };

kopt::ParamGroup group_of(std::size_t g, Placement placement) {
  const auto where = placement == Placement::local || g == 5 ? kopt::StatePlacement::with_params
                                                             : kopt::StatePlacement::host;
  switch (g) {
    case 0:
      return kopt::ParamGroup(kopt::AdamConfig{.weight_decay = 0.01}, where);
    case 1: {
      kopt::ParamGroup p(kopt::AdamConfig{.lr = 2e-3}, where);
      p.set_master(kopt::MasterStorage::remainder).set_state_dtype(DType::bf16);
      return p;
    }
    case 2: {
      kopt::ParamGroup p(kopt::AdamConfig{.lr = 3e-3, .amsgrad = true}, where);
      p.set_state_dtype(DType::q8);
      return p;
    }
    case 3:
      return kopt::ParamGroup(kopt::LionConfig{.lr = 1e-3}, where);
    case 4: {
      kopt::ParamGroup p(kopt::AdamConfig{.lr = 1e-2}, where);
      p.set_master(kopt::MasterStorage::none).set_rounding(kopt::Rounding::stochastic, 7);
      return p;
    }
    case 5:
      return kopt::ParamGroup(kopt::LambConfig{.lr = 1e-2}, where);
    default:
      return kopt::ParamGroup(kopt::SgdConfig{.lr = 1e-2, .momentum = 0.9}, where);
  }
}
constexpr std::size_t kGroups = 7;  // the last: f32 params (SGD); the others bf16

struct Model {
  std::int64_t total = 0;
  Kokkos::View<kopt::bfloat16*, Kokkos::HostSpace> param16, grad16;
  Kokkos::View<float*, Kokkos::HostSpace> param32, grad32;
  std::vector<Kokkos::View<unsigned char*, Kokkos::HostSpace>> own;  // `apart`: a buffer each
  std::unique_ptr<kopt::HybridOptimizer> opt;
  std::vector<kopt::Tensor> params, grads;  // as registered (grads: to give back)

  // `apart`: every param and grad in a buffer of its own, else cut from the flat buffers.
  Model(bool apart, Placement placement) {
    for (const auto n : kSizes) total += n;
    param16 = decltype(param16)("param16", total * (kGroups - 1));
    grad16 = decltype(grad16)("grad16", total * (kGroups - 1));
    param32 = decltype(param32)("param32", total);
    grad32 = decltype(grad32)("grad32", total);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (std::int64_t i = 0; i < param16.extent_int(0); ++i)
      param16(i) = kopt::bfloat16::from_float(normal(rng));
    for (std::int64_t i = 0; i < param32.extent_int(0); ++i) param32(i) = normal(rng);
    std::vector<kopt::ParamGroup> groups;
    for (std::size_t g = 0; g < kGroups; ++g) {
      groups.push_back(group_of(g, placement));
      const bool wide = g + 1 == kGroups;
      std::int64_t at = wide ? 0 : static_cast<std::int64_t>(g) * total;
      for (std::size_t j = 0; j < kSizes.size(); ++j) {
        const auto piece = std::make_pair(at, at + kSizes[j]);
        kopt::Tensor p = wide ? kopt::Tensor(Kokkos::subview(param32, piece))
                              : kopt::Tensor(Kokkos::subview(param16, piece));
        kopt::Tensor d = wide ? kopt::Tensor(Kokkos::subview(grad32, piece))
                              : kopt::Tensor(Kokkos::subview(grad16, piece));
        if (apart) {  // copies of the same values, in memory of their own
          p = own_copy(p);
          d = own_copy(d);
        }
        groups.back().add(name(g, j), p, d);
        params.push_back(p);
        grads.push_back(d);
        at += kSizes[j];
      }
    }
    kopt::HybridOptions options;
    if (placement == Placement::offloaded_cut) options.offload.chunk_elements = 512;
    opt = std::make_unique<kopt::HybridOptimizer>(std::move(groups), options);
    for (std::size_t g = 0; g < kGroups; ++g)
      EXPECT_EQ(opt->is_offloaded(name(g, 0)), placement != Placement::local && g != 5);
  }
  static std::string name(std::size_t g, std::size_t j) {
    return "g" + std::to_string(g) + "p" + std::to_string(j);
  }
  kopt::Tensor own_copy(const kopt::Tensor& t) {
    const std::size_t bytes = static_cast<std::size_t>(t.numel) * kopt::size_of(t.dtype);
    own.emplace_back("own", bytes + 64);  // +64: never next to another one's end
    std::memcpy(own.back().data(), t.data, bytes);
    return kopt::Tensor(own.back().data(), t.numel, t.dtype, kopt::MemorySpace::host);
  }
  // Grads drawn from `seed` into every param's grad; the update chunks one step launched.
  std::uint64_t step(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (const kopt::Tensor& d : grads)
      for (std::int64_t i = 0; i < d.numel; ++i) {
        const float x = 0.1f * normal(rng);
        if (d.dtype == DType::f32)
          static_cast<float*>(d.data)[i] = x;
        else
          static_cast<kopt::bfloat16*>(d.data)[i] = kopt::bfloat16::from_float(x);
      }
    const std::uint64_t before = kopt::Impl::launched_update_chunks().load();
    opt->step();
    return kopt::Impl::launched_update_chunks().load() - before;
  }
  // Param j of every group skips the next steps (a null grad), or takes its grad back.
  void freeze(std::size_t j, bool frozen) {
    for (std::size_t g = 0; g < kGroups; ++g)
      opt->set_grad(name(g, j), frozen ? kopt::Tensor() : grads[g * kSizes.size() + j]);
  }
  // Every param as its optimizer sees it (its own buffer where apart), element by element.
  std::vector<std::uint32_t> param_bits() const {
    std::vector<std::uint32_t> bits;
    for (const kopt::Tensor& p : params)
      for (std::int64_t i = 0; i < p.numel; ++i)
        bits.push_back(p.dtype == DType::f32
                           ? kopt_test::bits_of(static_cast<const float*>(p.data)[i])
                           : static_cast<const kopt::bfloat16*>(p.data)[i].bits);
    return bits;
  }
};

class ChunkRuns : public ::testing::TestWithParam<Placement> {};

TEST_P(ChunkRuns, ParamsCutFromOneBufferStepAsRunsBitwiseLikeParamsApart) {
  const Placement placement = GetParam();
  Model joined(false, placement), apart(true, Placement::local);
  // 7 groups of 6 params with elements: 42 chunks each on its own; runs of 4 and 2 params
  // in the 5 groups that join (the empty param between them in neither): 10 + 2 x 6.
  for (unsigned s = 0; s < 8; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    if (s == 3) joined.freeze(1, true), apart.freeze(1, true);
    if (s == 5) joined.freeze(1, false), apart.freeze(1, false);
    const std::uint64_t a = joined.step(s), b = apart.step(s);
    // Param 1 frozen: 36 apart, and the first runs split around it (3 runs a group);
    // back, its own step count keeps it out of its neighbours' runs (4 runs a group).
    const std::uint64_t runs = s < 3 ? 2 : s < 5 ? 3 : 4;
    const std::uint64_t own = s >= 3 && s < 5 ? 5 : 6;
    EXPECT_EQ(b, 7 * own);
    if (placement == Placement::offloaded_cut) {
      EXPECT_GT(a, 5 * runs + 2 * own);  // pipeline chunks of 512 cut runs and params
    } else {
      EXPECT_EQ(a, 5 * runs + 2 * own);
    }
    ASSERT_EQ(joined.param_bits(), apart.param_bits());
  }
  EXPECT_TRUE(kopt_test::saved_params(*joined.opt) == kopt_test::saved_params(*apart.opt));
}

// A checkpoint can give the params of a run step counts of their own without changing which
// params step (an offloaded group plans nothing again for it): the runs split for the rows
// of the step, bitwise like the optimizer that saved it.
TEST_P(ChunkRuns, LoadedStepCountsSplitRunsPlannedBefore) {
  const Placement placement = GetParam();
  Model saved(false, placement), loaded(false, placement);
  for (unsigned s = 0; s < 6; ++s) {
    if (s == 2) saved.freeze(1, true);
    if (s == 4) saved.freeze(1, false);
    saved.step(s);
  }
  // Every param with the same step count: one run of params 0-3 and one of 5-6 a group.
  const std::uint64_t before = loaded.step(100);
  if (placement != Placement::offloaded_cut) {
    EXPECT_EQ(before, 5 * 2 + 2 * 6);
  }
  kopt_test::TempDir dir;
  saved.opt->save(dir.str("ckpt"));
  Kokkos::deep_copy(loaded.param16, saved.param16);  // the model's weights
  Kokkos::deep_copy(loaded.param32, saved.param32);
  loaded.opt->load(dir.str("ckpt"));
  for (unsigned s = 6; s < 9; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::uint64_t a = saved.step(s), b = loaded.step(s);
    EXPECT_EQ(b, a);  // param 1 on its own, as in the optimizer saved
    ASSERT_EQ(loaded.param_bits(), saved.param_bits());
  }
  EXPECT_TRUE(kopt_test::saved_params(*loaded.opt) == kopt_test::saved_params(*saved.opt));
}

INSTANTIATE_TEST_SUITE_P(Placements, ChunkRuns,
                         ::testing::Values(Placement::local, Placement::offloaded,
                                           Placement::offloaded_cut),
                         [](const auto& info) {
                           return std::string(info.param == Placement::local ? "Local"
                                              : info.param == Placement::offloaded
                                                  ? "Offloaded"
                                                  : "OffloadedCut");
                         });

}  // namespace test_chunk_runs
}  // namespace
