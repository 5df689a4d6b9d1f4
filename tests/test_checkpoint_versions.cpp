// Checkpoints across format versions and algorithms: an index written by the version-1 rules
// (Adam only: no algorithm names, has_max in place of the array mask), here by the test's own
// writer from docs/checkpoint-format.md, still loads and resumes bitwise; and params that keep
// no state (SGD without momentum: blocks of zero bytes) save and load.
#include <gtest/gtest.h>

#include <cstring>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>

#include "checkpoint_model.hpp"

namespace {
namespace test_checkpoint_versions {

using kopt_test::read_all;
using kopt_test::TempDir;
using kopt_test::write_all;
using Bytes = std::vector<unsigned char>;

// Not inlined: inlined into version_one, GCC 12 took the growth of `head` from 8 bytes for
// an out-of-bounds write (-Warray-bounds, a known false positive).
template <class T>
__attribute__((noinline)) void put(Bytes& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));  // little-endian machines only, as kopt's tests
}

// `index` in the bytes of format version 1 (every group Adam).
Bytes version_one(const kopt::Impl::Index& index) {
  Bytes body;
  put(body, index.generation);
  put(body, index.world_size);
  put(body, static_cast<std::uint8_t>(index.has_scaler));
  put(body, index.scale);
  put(body, index.growth_tracker);
  put(body, static_cast<std::uint32_t>(index.groups.size()));
  for (const kopt::AlgorithmConfig& g : index.groups) {
    const auto& c = std::get<kopt::AdamConfig>(g);
    for (const double x : {c.lr, c.beta1, c.beta2, c.eps, c.weight_decay}) put(body, x);
    for (const bool b : {c.decoupled, c.amsgrad, c.bias_correction, c.maximize})
      put(body, static_cast<std::uint8_t>(b));
  }
  put(body, static_cast<std::uint32_t>(index.params.size()));
  for (const kopt::Impl::IndexParam& p : index.params) {
    put(body, static_cast<std::uint32_t>(p.name.size()));
    body.insert(body.end(), p.name.begin(), p.name.end());
    put(body, p.group);
    put(body, static_cast<std::uint8_t>(p.dtype));
    put(body, p.global_numel);
    put(body, p.step);
    put(body, static_cast<std::uint8_t>(p.arrays == 7));  // has_max
    put(body, static_cast<std::uint8_t>(p.has_master));
  }
  const Bytes blocks = kopt::Impl::serialize_blocks(index.blocks);  // unchanged since 1
  body.insert(body.end(), blocks.begin(), blocks.end());
  Bytes head(kopt::Impl::kIndexMagic, kopt::Impl::kIndexMagic + 8);
  put(head, std::uint32_t{1});
  put(head, std::uint32_t{0});
  put(head, static_cast<std::uint64_t>(body.size()));
  put(head, kopt::Impl::crc32c(body.data(), body.size()));
  put(head, kopt::Impl::crc32c(head.data(), head.size()));
  head.insert(head.end(), body.begin(), body.end());
  return head;
}

struct Model {
  std::vector<float> w = std::vector<float>(1031), dw = w;
  std::vector<kopt::bfloat16> v = std::vector<kopt::bfloat16>(77), dv = v;
  std::unique_ptr<kopt::HybridOptimizer> opt;
  Model(const kopt::AlgorithmConfig& a, const kopt::AlgorithmConfig& b) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * static_cast<float>(i));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = kopt::bfloat16::from_float(std::cos(0.3f * i));
    kopt::ParamGroup g0(a), g1(b, kopt::StatePlacement::host);
    g0.add("w", kopt::Tensor::from(w.data(), 1031), kopt::Tensor::from(dw.data(), 1031));
    g1.add("v", kopt::Tensor::from(v.data(), 77), kopt::Tensor::from(dv.data(), 77));
    opt = std::make_unique<kopt::HybridOptimizer>(std::vector<kopt::ParamGroup>{g0, g1});
  }
  void train(int first, int steps) {
    for (int s = first; s < first + steps; ++s) {
      for (std::size_t i = 0; i < dw.size(); ++i) dw[i] = std::sin(0.7f * (s + 1) * (i + 1));
      for (std::size_t i = 0; i < dv.size(); ++i)
        dv[i] = kopt::bfloat16::from_float(std::cos(0.5f * s * i));
      opt->step();
    }
  }
  void expect_same(const Model& o) const {
    EXPECT_EQ(std::memcmp(w.data(), o.w.data(), w.size() * 4), 0);
    EXPECT_EQ(std::memcmp(v.data(), o.v.data(), v.size() * 2), 0);
    EXPECT_EQ(opt->step_count("w"), o.opt->step_count("w"));
  }
};

// Trains `a` 5 steps, saves, trains 5 more; a fresh model given a's weights at the save
// loads (after `rewrite` of the directory) and trains the same 5: bitwise the same.
void expect_resume(const kopt::AlgorithmConfig& c0, const kopt::AlgorithmConfig& c1,
                   const std::function<void(const TempDir&)>& rewrite = {}) {
  TempDir dir;
  Model a(c0, c1), b(c0, c1);
  a.train(0, 5);
  a.opt->save(dir.str());
  b.w = a.w;
  b.v = a.v;
  if (rewrite) rewrite(dir);
  b.opt->load(dir.str());
  a.train(5, 5);
  b.train(5, 5);
  a.expect_same(b);
}

TEST(CheckpointVersions, AVersionOneIndexStillLoadsAndResumesBitwise) {
  for (const bool amsgrad : {false, true}) {
    int rewrites = 0;
    expect_resume(kopt::AdamConfig{.amsgrad = amsgrad}, kopt::AdamConfig{.lr = 3e-3},
                  [&](const TempDir& dir) {
                    const auto file = dir.path / kopt::Impl::kIndexName;
                    const auto index = kopt::Impl::parse_index(read_all(file), "test");
                    const Bytes v1 = version_one(index);
                    // What a version-1 reader reads back is the same index.
                    const auto again = kopt::Impl::parse_index(v1, "v1");
                    EXPECT_EQ(kopt::Impl::serialize_index(again), read_all(file));
                    write_all(file, v1);
                    ++rewrites;
                  });
    EXPECT_EQ(rewrites, 1);
  }
}

// A version-2 index (every array fp32: no array dtypes) still loads and resumes bitwise.
TEST(CheckpointVersions, AVersionTwoIndexStillLoadsAndResumesBitwise) {
  int rewrites = 0;
  expect_resume(kopt::AdamConfig{}, kopt::SgdConfig{.lr = 0.1, .momentum = 0.9},
                [&](const TempDir& dir) {
                  const auto file = dir.path / kopt::Impl::kIndexName;
                  const auto index = kopt::Impl::parse_index(read_all(file), "test");
                  const Bytes v2 = kopt::Impl::serialize_index(index, 2);
                  EXPECT_EQ(v2.size() + (3 + 24) * index.params.size(), read_all(file).size());
                  const auto again = kopt::Impl::parse_index(v2, "v2");
                  EXPECT_EQ(kopt::Impl::serialize_index(again), read_all(file));
                  write_all(file, v2);
                  ++rewrites;
                });
  EXPECT_EQ(rewrites, 1);
}

// A version-3 index (no shapes, no per-param state) still loads and resumes bitwise.
TEST(CheckpointVersions, AVersionThreeIndexStillLoadsAndResumesBitwise) {
  int rewrites = 0;
  expect_resume(kopt::AdamConfig{.amsgrad = true}, kopt::LionConfig{}, [&](const TempDir& dir) {
    const auto file = dir.path / kopt::Impl::kIndexName;
    const auto index = kopt::Impl::parse_index(read_all(file), "test");
    const Bytes v3 = kopt::Impl::serialize_index(index, 3);
    EXPECT_EQ(v3.size() + 24 * index.params.size(), read_all(file).size());
    const auto again = kopt::Impl::parse_index(v3, "v3");
    EXPECT_EQ(kopt::Impl::serialize_index(again), read_all(file));
    write_all(file, v3);
    ++rewrites;
  });
  EXPECT_EQ(rewrites, 1);
}

// A version-4 index (no q8 arrays: its bytes are version 5's) still loads and resumes
// bitwise; a version-4 writer refuses an index with q8 arrays, naming the param.
TEST(CheckpointVersions, AVersionFourIndexStillLoadsAndResumesBitwise) {
  int rewrites = 0;
  expect_resume(kopt::AdamConfig{.amsgrad = true}, kopt::LionConfig{}, [&](const TempDir& dir) {
    const auto file = dir.path / kopt::Impl::kIndexName;
    auto index = kopt::Impl::parse_index(read_all(file), "test");
    const Bytes v4 = kopt::Impl::serialize_index(index, 4);
    EXPECT_EQ(v4.size(), read_all(file).size());
    const auto again = kopt::Impl::parse_index(v4, "v4");
    EXPECT_EQ(kopt::Impl::serialize_index(again), read_all(file));
    write_all(file, v4);
    ++rewrites;
    index.params.at(0).array_dtypes[0] = kopt::DType::q8;
    try {
      (void)kopt::Impl::serialize_index(index, 4);
      ADD_FAILURE() << "a version-4 index with a q8 array was written";
    } catch (const kopt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds no q8 arrays; param '" + index.params[0].name),
                std::string::npos)
          << e.what();
    }
  });
  EXPECT_EQ(rewrites, 1);
}

TEST(CheckpointVersions, ParamsWithoutStateSaveAndLoad) {
  // SGD without momentum: an f32 param keeps nothing (blocks of 0 bytes), a bf16 one its
  // master alone.
  expect_resume(kopt::SgdConfig{.lr = 0.1}, kopt::SgdConfig{.lr = 0.1, .weight_decay = 0.01});
  expect_resume(kopt::SgdConfig{.lr = 0.1, .momentum = 0.9}, kopt::LionConfig{});
  expect_resume(kopt::AdagradConfig{.initial_accumulator_value = 0.1},
                kopt::SgdConfig{.momentum = 0.5, .dampening = 0.1});
}

}  // namespace test_checkpoint_versions
}  // namespace
