// The C interface's sharded optimizer (kopt_optimizer_create_sharded) under mpirun: ZeRO-1
// gives bitwise one process's C optimizer, ZeRO-2 bitwise the C++ sharded optimizer's with the
// same options; arguments refused on one rank are refused on every rank (none waits in a
// collective); checkpoints round-trip. Runs at any world size.
#include <gtest/gtest.h>
#include <kopt/kopt.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <kopt/kopt.hpp>
#include <random>
#include <vector>

#include "shared_dir.hpp"
#include "world.hpp"

namespace {
namespace test_c_api_mpi {

using kopt_test::world_rank;
using kopt_test::world_size;

// MPI_COMM_WORLD's Fortran handle (after MPI_Init).
int world_handle() { return MPI_Comm_c2f(MPI_COMM_WORLD); }

// An f32 param of 1001 elements and a bf16 one of 517, with grads: the params the same on
// every rank, the grads drawn from `grad_seed`.
struct Model {
  std::vector<float> w, gw;
  std::vector<std::uint16_t> h, gh;
  explicit Model(unsigned grad_seed) : w(1001), gw(1001), h(517), gh(517) {
    std::mt19937 gen(7), grads(grad_seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& x : w) x = d(gen);
    for (std::uint16_t& x : h) x = kopt::bfloat16::from_float(d(gen)).bits;
    for (float& x : gw) x = d(grads);
    for (std::uint16_t& x : gh) x = kopt::bfloat16::from_float(d(grads)).bits;
  }
  kopt_groups* groups() {
    kopt_groups* g = nullptr;
    kopt_adam_config c;
    kopt_adam_config_default(&c);
    c.lr = 1e-2;
    EXPECT_EQ(kopt_groups_create(&g), KOPT_OK);
    EXPECT_EQ(kopt_groups_add_group(g, &c, 0, nullptr), KOPT_OK);
    EXPECT_EQ(
        kopt_groups_add_param(g, 0, "w", w.data(), KOPT_F32, gw.data(), KOPT_F32, 1001, KOPT_HOST),
        KOPT_OK);
    EXPECT_EQ(
        kopt_groups_add_param(g, 0, "h", h.data(), KOPT_BF16, gh.data(), KOPT_BF16, 517, KOPT_HOST),
        KOPT_OK);
    return g;
  }
  kopt_optimizer* sharded(int stage, int average, const kopt_options* options = nullptr) {
    kopt_groups* g = groups();
    kopt_optimizer* opt = nullptr;
    EXPECT_EQ(kopt_optimizer_create_sharded(g, options, world_handle(), stage, average, &opt),
              KOPT_OK)
        << kopt_last_error();
    kopt_groups_destroy(g);
    return opt;
  }
  bool operator==(const Model& o) const { return w == o.w && h == o.h; }
};

kopt_options clipped() {
  kopt_options o;
  kopt_options_default(&o);
  o.max_grad_norm = 1.0;
  return o;
}

TEST(CApiSharded, Zero1MatchesOneProcessBitwise) {
  Model a(11), b(11);  // ZeRO-1: the grads are already all-reduced, the same on every rank
  const kopt_options o = clipped();
  kopt_optimizer* sharded = a.sharded(1, 0, &o);
  kopt_groups* g = b.groups();
  kopt_optimizer* one = nullptr;
  ASSERT_EQ(kopt_optimizer_create(g, &o, &one), KOPT_OK);
  kopt_groups_destroy(g);
  ASSERT_NE(sharded, nullptr);
  for (int s = 0; s < 5; ++s) {
    kopt_step_stats x, y;
    ASSERT_EQ(kopt_step(sharded, &x), KOPT_OK) << kopt_last_error();
    ASSERT_EQ(kopt_step(one, &y), KOPT_OK);
    EXPECT_EQ(x.grad_norm, y.grad_norm);
  }
  EXPECT_TRUE(a == b);
  std::int64_t count = 0;
  EXPECT_EQ(kopt_step_count(sharded, "h", &count), KOPT_OK);
  EXPECT_EQ(count, 5);
  kopt_optimizer_destroy(sharded);
  kopt_optimizer_destroy(one);
}

TEST(CApiSharded, Zero2AveragesLikeTheCppOptimizer) {
  Model a(100 + static_cast<unsigned>(world_rank())), b(100 + static_cast<unsigned>(world_rank()));
  const kopt_options o = clipped();
  kopt_optimizer* c = a.sharded(2, 1, &o);
  kopt::ParamGroup group(kopt::AdamConfig{.lr = 1e-2});
  group.add("w", kopt::Tensor::from(b.w.data(), 1001), kopt::Tensor::from(b.gw.data(), 1001));
  group.add("h", kopt::Tensor(b.h.data(), 517, kopt::DType::bf16),
            kopt::Tensor(b.gh.data(), 517, kopt::DType::bf16));
  kopt::HybridOptimizer cpp({group},
                            kopt_test::sharded({.max_grad_norm = 1.0}, kopt::ZeroStage::two,
                                               kopt::GradReduction::average));
  for (int s = 0; s < 4; ++s) {
    ASSERT_EQ(kopt_step(c, nullptr), KOPT_OK) << kopt_last_error();
    cpp.step();
  }
  EXPECT_TRUE(a == b);
  kopt_optimizer_destroy(c);
}

TEST(CApiSharded, RefusedOnOneRankRefusedOnEvery) {
  Model m(3);
  const bool last = world_rank() == world_size() - 1;
  kopt_groups* g = m.groups();
  kopt_optimizer* opt = nullptr;
  EXPECT_EQ(kopt_optimizer_create_sharded(g, nullptr, world_handle(), last ? 3 : 1, 0, &opt),
            KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(opt, nullptr);
  const std::string said = kopt_last_error();
  EXPECT_NE(said.find(last ? "zero_stage = 3 must be 1 or 2" : "failed on rank"), std::string::npos)
      << said;
  // Options refused on one rank only.
  kopt_options bad;
  kopt_options_default(&bad);
  bad.max_grad_norm = last ? std::nan("") : 1.0;
  EXPECT_EQ(kopt_optimizer_create_sharded(g, &bad, world_handle(), 1, 0, &opt),
            KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kopt_last_error()).find(last ? "max_grad_norm is NaN" : "failed on rank"),
            std::string::npos)
      << kopt_last_error();
  // MPI_COMM_NULL's handle, and one of no communicator, on every rank: refused, not fatal.
  EXPECT_EQ(kopt_optimizer_create_sharded(g, nullptr, 12345, 1, 0, &opt),
            KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kopt_last_error()).find("not a communicator"), std::string::npos);
  EXPECT_EQ(kopt_optimizer_create_sharded(g, nullptr, MPI_Comm_c2f(MPI_COMM_NULL), 1, 0, &opt),
            KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kopt_last_error()).find("MPI_COMM_NULL"), std::string::npos);
  // Good arguments on every rank now: the world is still in step.
  ASSERT_EQ(kopt_optimizer_create_sharded(g, nullptr, world_handle(), 2, 0, &opt), KOPT_OK);
  EXPECT_EQ(kopt_step(opt, nullptr), KOPT_OK);
  // Collective calls' arguments refused on one rank only.
  const kopt_test::SharedDir dir;
  EXPECT_EQ(kopt_save(opt, last ? nullptr : dir.path.c_str()), KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kopt_last_error()).find(last ? "path is NULL" : "kopt_save failed on"),
            std::string::npos)
      << kopt_last_error();
  ASSERT_EQ(kopt_save(opt, dir.path.c_str()), KOPT_OK);
  EXPECT_EQ(kopt_load(opt, dir.path.c_str(), last ? 2 : 0), KOPT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kopt_last_error()).find(last ? "partial = 2" : "kopt_load failed on"),
            std::string::npos)
      << kopt_last_error();
  EXPECT_EQ(kopt_load(opt, dir.path.c_str(), 0), KOPT_OK);
  EXPECT_EQ(kopt_step(opt, nullptr), KOPT_OK);
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(g);
}

TEST(CApiSharded, SavesAndLoadsAcrossRanks) {
  Model a(5), b(5), c(5);
  kopt_optimizer* x = a.sharded(1, 0);
  kopt_optimizer* y = b.sharded(1, 0);
  const kopt_test::SharedDir dir;
  ASSERT_EQ(kopt_step(x, nullptr), KOPT_OK);
  ASSERT_EQ(kopt_step(x, nullptr), KOPT_OK);
  ASSERT_EQ(kopt_save(x, dir.path.c_str()), KOPT_OK) << kopt_last_error();
  std::memcpy(b.w.data(), a.w.data(), a.w.size() * sizeof(float));  // the weights, restored
  std::memcpy(b.h.data(), a.h.data(), a.h.size() * sizeof(std::uint16_t));
  ASSERT_EQ(kopt_load(y, dir.path.c_str(), 0), KOPT_OK) << kopt_last_error();
  std::int64_t count = 0;
  EXPECT_EQ(kopt_step_count(y, "w", &count), KOPT_OK);
  EXPECT_EQ(count, 2);
  ASSERT_EQ(kopt_step(x, nullptr), KOPT_OK);
  ASSERT_EQ(kopt_step(y, nullptr), KOPT_OK);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  kopt_optimizer_destroy(x);
  kopt_optimizer_destroy(y);
}

}  // namespace test_c_api_mpi
}  // namespace
