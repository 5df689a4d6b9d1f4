// Checkpoints in one process: bit-exact resume across layouts and placements, corrupt and
// mismatched files refused without changing anything, and saves that fail part-way leave
// the previous checkpoint loadable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>

#include "checkpoint_model.hpp"
#include "test_support.hpp"

namespace {
namespace test_checkpoint {

namespace fs = std::filesystem;
using kopt_test::CheckpointModel;
using kopt_test::expect_error;
using kopt_test::ParamDef;
using kopt_test::TempDir;

const std::vector<kopt::AdamConfig> kConfigs = {
    kopt::AdamConfig{},
    kopt::AdamConfig{.lr = 3e-3, .beta2 = 0.99, .weight_decay = 0.1, .amsgrad = true},
    kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.0, .decoupled = false}};

std::vector<ParamDef> model_defs() { return kopt_test::mixed_defs(2); }  // 8 params, mixed
const std::vector<std::size_t> kGroupsOf = {0, 1, 2, 0, 1, 2, 0, 1};
const std::vector<std::size_t> kOrder = {0, 1, 2, 3, 4, 5, 6, 7};

kopt::HybridOptions options(bool clip) {
  kopt::HybridOptions o;
  if (clip) o.max_grad_norm = 0.5;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 2};
  return o;
}

CheckpointModel model_a(bool clip) {
  return CheckpointModel(model_defs(), kConfigs, kGroupsOf, kOrder, options(clip),
                         {false, false, true});
}

TEST(Checkpoint, Crc32cOfTheStandardCheckString) {
  EXPECT_EQ(kopt::Impl::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(kopt::Impl::crc32c("", 0), 0u);
}

// Train 3 steps, save, and resume from the file in a fresh optimizer (laid out as `b` says)
// given the model weights: 4 more steps give bitwise the uninterrupted run.
void expect_resume_is_bitwise(bool clip, CheckpointModel (*make_b)(bool)) {
  TempDir dir;
  CheckpointModel a = model_a(clip);
  a.train(0, 3);
  a.opt->save(dir.str("ckpt"));
  CheckpointModel b = make_b(clip);
  b.copy_params_from(a);
  b.opt->load(dir.str("ckpt"));
  a.train(3, 4);
  b.train(3, 4);
  a.expect_same(b);
}

TEST(Checkpoint, ResumesBitwiseInTheSameLayout) { expect_resume_is_bitwise(true, model_a); }

TEST(Checkpoint, ResumesBitwiseInAnotherOrderGroupingAndPlacement) {
  // Five groups instead of three (same configs per param), registered in reverse order,
  // nothing offloaded (saved from an offloaded group). Without clipping: the norm is summed
  // in registration order, which this changes.
  expect_resume_is_bitwise(false, [](bool clip) {
    return CheckpointModel(model_defs(),
                           {kConfigs[0], kConfigs[1], kConfigs[2], kConfigs[0], kConfigs[1]},
                           {0, 1, 2, 3, 4, 2, 3, 4}, {7, 6, 5, 4, 3, 2, 1, 0}, options(clip));
  });
}

using kopt_test::data_file;
using kopt_test::read_all;
using kopt_test::write_all;

TEST(Checkpoint, BadFilesAreRefusedAndChangeNothing) {
  TempDir dir;
  CheckpointModel a = model_a(true);
  a.train(0, 2);
  a.opt->save(dir.str("good"));
  // The victim has state of its own; a twin never sees the bad files.
  CheckpointModel victim = model_a(true), twin = model_a(true);
  victim.train(0, 1);
  twin.train(0, 1);
  const auto corrupt = [&](const std::string& what, auto&& change, const std::string& expect) {
    SCOPED_TRACE(what);
    const fs::path bad = dir.path / what;
    fs::copy(dir.path / "good", bad);
    change(bad);
    try {
      victim.opt->load(bad.string());
      ADD_FAILURE() << "loaded";
    } catch (const kopt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  corrupt(
      "truncated",
      [](const fs::path& d) {
        auto b = read_all(d / "index.kopt");
        b.resize(b.size() - 9);
        write_all(d / "index.kopt", b);
      },
      "truncated");
  corrupt(
      "flipped-metadata",
      [](const fs::path& d) {
        auto b = read_all(d / "index.kopt");
        b[60] ^= 0x10;
        write_all(d / "index.kopt", b);
      },
      "metadata checksum");
  corrupt(
      "flipped-data",
      [](const fs::path& d) {
        auto b = read_all(data_file(d));
        b[kopt::Impl::kDataHeaderBytes + 17] ^= 0x01;
        write_all(data_file(d), b);
      },
      "checksum mismatch in the data");
  corrupt(
      "version",
      [](const fs::path& d) {
        auto b = read_all(d / "index.kopt");
        b[8] = 6;  // and a consistent header checksum: the version check must catch it
        const std::uint32_t crc = kopt::Impl::crc32c(b.data(), 28);
        for (int k = 0; k < 4; ++k) b[28 + k] = static_cast<unsigned char>(crc >> (8 * k));
        write_all(d / "index.kopt", b);
      },
      "format version 6");
  corrupt(
      "magic",
      [](const fs::path& d) {
        auto b = read_all(d / "index.kopt");
        b[0] = 'X';
        write_all(d / "index.kopt", b);
      },
      "bad magic");
  corrupt(
      "missing-rank-file", [](const fs::path& d) { fs::remove(data_file(d)); }, "cannot open");
  corrupt(
      "missing-index", [](const fs::path& d) { fs::remove(d / "index.kopt"); }, "index.kopt");
  // Nothing changed: the victim goes on exactly as its twin.
  victim.train(1, 3);
  twin.train(1, 3);
  victim.expect_same(twin);
}

TEST(Checkpoint, NamesSizesAndDtypesMustMatchUnlessPartialIsAsked) {
  TempDir dir;
  CheckpointModel a = model_a(false);
  a.train(0, 2);
  a.opt->save(dir.str());
  std::vector<ParamDef> fewer = model_defs();
  fewer.pop_back();  // the file has a param this optimizer lacks
  CheckpointModel small(fewer, kConfigs, kGroupsOf, {0, 1, 2, 3, 4, 5, 6}, options(false));
  // Named: with many params a count alone does not say which to look for.
  expect_error<kopt::CheckpointError>([&] { small.opt->load(dir.str()); },
                                      "holds 1 params this optimizer does not have ('p7';");
  EXPECT_EQ(small.opt->step_count("p0"), 0);
  small.opt->load(dir.str(), {.partial = true});
  EXPECT_EQ(small.opt->step_count("p0"), 2);
  std::vector<ParamDef> more = model_defs();
  more.push_back(ParamDef{0, kopt::DType::f32, kopt::DType::f32, false, 5});  // not in the file
  CheckpointModel big(more, kConfigs, {0, 1, 2, 0, 1, 2, 0, 1, 0}, {0, 1, 2, 3, 4, 5, 6, 7, 8},
                      options(false));
  EXPECT_THROW(big.opt->load(dir.str()), kopt::CheckpointError);
  big.opt->load(dir.str(), {.partial = true});
  EXPECT_EQ(big.opt->step_count("p8"), 0);
  EXPECT_EQ(big.opt->step_count("p7"), 2);
  std::vector<ParamDef> resized = model_defs();
  resized[1].n += 1;
  CheckpointModel other(resized, kConfigs, kGroupsOf, kOrder, options(false));
  EXPECT_THROW(other.opt->load(dir.str(), {.partial = true}), kopt::CheckpointError);
  std::vector<ParamDef> retyped = model_defs();
  retyped[0].param = kopt::DType::bf16;
  CheckpointModel typed(retyped, kConfigs, kGroupsOf, kOrder, options(false));
  EXPECT_THROW(typed.opt->load(dir.str()), kopt::CheckpointError);
  // Every param in one group: the file's three configs cannot all be that group's.
  CheckpointModel merged(model_defs(), kConfigs, std::vector<std::size_t>(8, 0), kOrder,
                         options(false));
  expect_error<kopt::CheckpointError>([&] { merged.opt->load(dir.str()); },
                                      "group 0 holds params saved with different configs");
  EXPECT_EQ(merged.opt->step_count("p0"), 0);
  EXPECT_EQ(merged.opt->group(0).config().lr, kConfigs[0].lr);
}

// A partial load gives each param the file lacks the state a new param starts from,
// whatever it held: a stepped optimizer then steps bitwise as a new one loaded from the same
// file, given the same weights before or after the load (the masters of the 16-bit params
// the file lacks, p5 offloaded and p6 local, follow them as a new param's do). Before, such
// params kept their moments, step counts and stale masters, which overwrote the weights.
TEST(Checkpoint, APartialLoadGivesMissingParamsFreshState) {
  for (const bool weights_first : {false, true}) {
    SCOPED_TRACE(weights_first ? "weights written before the load" : "after the load");
    TempDir dir;
    const std::vector<ParamDef> all = model_defs();
    CheckpointModel half({all.begin(), all.begin() + 4}, kConfigs, {0, 1, 2, 0}, {0, 1, 2, 3},
                         options(true), {false, false, true});
    half.train(0, 2);
    half.opt->save(dir.str());  // p0..p3 of the 8
    CheckpointModel stepped = model_a(true), fresh = model_a(true), weights = model_a(true);
    stepped.train(0, 3);  // state and masters of its own in every param
    weights.train(5, 2);  // other weights for every param
    for (CheckpointModel* m : {&stepped, &fresh}) {
      if (weights_first) m->copy_params_from(weights);
      m->opt->load(dir.str(), {.partial = true});
      if (!weights_first) m->copy_params_from(weights);
    }
    EXPECT_EQ(stepped.opt->step_count("p3"), 2);
    for (std::size_t j = 4; j < all.size(); ++j)
      EXPECT_EQ(stepped.opt->step_count(CheckpointModel::name(j)), 0);
    stepped.train(3, 3);
    fresh.train(3, 3);
    stepped.expect_same(fresh);
  }
}

TEST(Checkpoint, SaveRefusesConfigsThatLoadWouldRefuse) {
  TempDir dir;
  CheckpointModel a = model_a(false), twin = model_a(false);
  a.train(0, 2);
  twin.train(0, 2);
  a.opt->save(dir.str());
  const auto index = read_all(dir.path / "index.kopt");
  const auto data = read_all(data_file(dir.path));
  for (const double bad : {1.5, -0.1}) {
    a.opt->group(1).config<kopt::AdamConfig>().beta1 = bad;
    try {
      a.opt->save(dir.str());
      ADD_FAILURE() << "save took beta1 = " << bad;
    } catch (const kopt::InvalidArgument& e) {
      EXPECT_NE(
          std::string(e.what()).find("kopt::HybridOptimizer::save: group 1: AdamConfig.beta1"),
          std::string::npos)
          << e.what();
    }
  }
  // The good checkpoint is there, byte for byte, and loads; the optimizer is unchanged.
  EXPECT_EQ(read_all(dir.path / "index.kopt"), index);
  EXPECT_EQ(read_all(data_file(dir.path)), data);
  a.opt->group(1).config<kopt::AdamConfig>().beta1 = kConfigs[1].beta1;
  CheckpointModel b = model_a(false);
  b.copy_params_from(a);
  b.opt->load(dir.str());
  a.train(2, 2);
  b.train(2, 2);
  twin.train(2, 2);
  a.expect_same(twin);
  b.expect_same(twin);
}

// A save that fails at any byte (as a crash or a full disk would leave it) keeps the
// previous checkpoint whole: it loads and resumes as it would have before.
TEST(Checkpoint, ASaveThatFailsPartWayLeavesThePreviousOneLoadable) {
  TempDir dir;
  CheckpointModel a = model_a(true);
  a.train(0, 2);
  a.opt->save(dir.str("ckpt"));
  fs::copy(dir.path / "ckpt", dir.path / "pristine");
  CheckpointModel from_pristine = model_a(true);
  from_pristine.copy_params_from(a);
  a.train(2, 2);
  const std::size_t total =
      fs::file_size(data_file(dir.path / "ckpt")) + fs::file_size(dir.path / "ckpt" / "index.kopt");
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{100},
                        total / 3, total / 2, total - 700, total - 100, total - 1}) {
    SCOPED_TRACE("failing after " + std::to_string(k) + " of " + std::to_string(total) + " bytes");
    kopt::Impl::set_checkpoint_write_failure_after(static_cast<std::int64_t>(k));
    EXPECT_THROW(a.opt->save(dir.str("ckpt")), kopt::CheckpointError);
    kopt::Impl::set_checkpoint_write_failure_after(-1);
    CheckpointModel loaded = model_a(true);
    loaded.copy_params_from(from_pristine);
    loaded.opt->load(dir.str("ckpt"));
    EXPECT_EQ(loaded.opt->step_count("p0"), 2);
  }
  from_pristine.opt->load(dir.str("pristine"));
  CheckpointModel loaded = model_a(true);
  loaded.copy_params_from(from_pristine);
  loaded.opt->load(dir.str("ckpt"));
  loaded.train(2, 3);
  from_pristine.train(2, 3);
  loaded.expect_same(from_pristine);
  a.opt->save(dir.str("ckpt"));  // and a save that succeeds replaces it, leaving one data file
  std::size_t data_files = 0;
  for (const auto& f : fs::directory_iterator(dir.path / "ckpt"))
    data_files += f.path().filename().string().rfind("data-", 0) == 0;
  EXPECT_EQ(data_files, 1u);
}

}  // namespace test_checkpoint
}  // namespace
