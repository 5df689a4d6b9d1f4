// The checkpoint's files as the file system sees them: a save never removes a file it did
// not write, a save that fails (a full disk) removes what it wrote, a second concurrent saver
// is refused, anything but a regular file is refused before it is read, and a moved-from
// optimizer cannot replace a checkpoint with an empty one.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>
#include <set>

#include "checkpoint_model.hpp"

namespace {
namespace test_checkpoint_files {

namespace fs = std::filesystem;
using namespace kopt_test;

CheckpointModel model() {
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 4};
  return CheckpointModel(mixed_defs(1), {kopt::AdamConfig{}}, {0, 0, 0, 0}, {0, 1, 2, 3}, o);
}

// The directory's file names.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& f : fs::directory_iterator(dir)) out.insert(f.path().filename().string());
  return out;
}

// A fresh model loaded from `dir` has step count `steps`.
void expect_loads(CheckpointModel& weights, const fs::path& dir, std::int64_t steps) {
  CheckpointModel b = model();
  b.copy_params_from(weights);
  b.opt->load(dir.string());
  EXPECT_EQ(b.opt->step_count("p0"), steps);
}

// A model saved after one step (`weights`: its weights then), then trained one step more.
struct SavedOnce {
  TempDir dir;
  fs::path ckpt = dir.path / "ckpt";
  CheckpointModel a = model(), weights = model();
  SavedOnce() {
    a.train(0, 1);
    a.opt->save(ckpt.string());
    weights.copy_params_from(a);
    a.train(1, 1);
  }
};

TEST(CheckpointFiles, SaveRemovesOnlyWhatThisFormatWrote) {
  TempDir dir;
  const fs::path ckpt = dir.path / "ckpt";
  fs::create_directories(ckpt);
  // Look-alikes of the format's names, with a user's content.
  const std::vector<std::string> users = {"data-train-shard-000.bin",
                                          "data-users.csv",
                                          "data-",
                                          "model.kopt.tmp.keep",
                                          "index.kopt.tmp.keep",
                                          "index.kopt.tmp.123",             // not the magic
                                          "data-0123456789abcdef-r0.kopt",  // not a kopt header
                                          "data-0123456789ABCDEF-r0.kopt",  // upper-case hex
                                          "data-0123456789abcdef-r00.kopt",
                                          "data-0123456789abcdef-r0.kopt.bak",
                                          "notes.txt"};
  for (const std::string& name : users) write_all(ckpt / name, {'u', 's', 'e', 'r'});
  fs::create_directories(ckpt / "data-0000000000000001-r0.kopt");  // a directory
  // What an earlier, crashed save left: its torn temporaries (a prefix of the magic).
  write_all(ckpt / "index.kopt.tmp.99999", {'K', 'O', 'P', 'T', 'I'});
  write_all(ckpt / "data-00000000000000aa-r3.kopt.tmp.4242", {});
  CheckpointModel a = model();
  a.train(0, 1);
  a.opt->save(ckpt.string());
  const std::string first_data = kopt::Impl::data_file_name(
      kopt::Impl::parse_index(read_all(ckpt / "index.kopt"), "index").generation, 0);
  a.train(1, 1);
  a.opt->save(ckpt.string());  // removes the first save's data file
  const std::set<std::string> left = names_in(ckpt);
  for (const std::string& name : users) EXPECT_EQ(left.count(name), 1u) << name;
  EXPECT_EQ(left.count("data-0000000000000001-r0.kopt"), 1u);
  EXPECT_EQ(left.count("index.kopt.tmp.99999"), 0u);
  EXPECT_EQ(left.count("data-00000000000000aa-r3.kopt.tmp.4242"), 0u);
  EXPECT_EQ(left.count(first_data), 0u);
  EXPECT_EQ(left.size(), users.size() + 3);  // the users', the directory, index, one data file
  for (const std::string& name : users) EXPECT_EQ(read_all(ckpt / name).size(), 4u) << name;
  expect_loads(a, ckpt, 2);
}

// RLIMIT_FSIZE makes a write past the limit fail (EFBIG, SIGXFSZ ignored) as a full disk
// would: the save fails, its temporaries and data file are gone, the previous checkpoint
// loads, and a retry after space is freed succeeds.
TEST(CheckpointFiles, ASaveOnAFullDiskRemovesWhatItWroteAndARetrySucceeds) {
  SavedOnce saved;
  auto& [dir, ckpt, a, weights] = saved;
  const std::set<std::string> before = names_in(ckpt);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto handler = std::signal(SIGXFSZ, SIG_IGN);
  for (const rlim_t limit : {rlim_t{0}, rlim_t{1000}, rlim_t{40000}}) {
    SCOPED_TRACE("file size limit " + std::to_string(limit));
    rlimit small = old;
    small.rlim_cur = limit;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    EXPECT_THROW(a.opt->save(ckpt.string()), kopt::CheckpointError);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    EXPECT_EQ(names_in(ckpt), before);  // nothing of the failed save is left
    expect_loads(weights, ckpt, 1);
  }
  std::signal(SIGXFSZ, handler);
  a.opt->save(ckpt.string());
  expect_loads(a, ckpt, 2);
}

TEST(CheckpointFiles, ASecondConcurrentSaverIsRefusedAndTheLockIsReleased) {
  SavedOnce saved;
  auto& [dir, ckpt, a, weights] = saved;
  {
    const kopt::Impl::DirectoryLock other_saver(ckpt.string());  // another job, mid-save
    try {
      a.opt->save(ckpt.string());
      ADD_FAILURE() << "saved beside another saver";
    } catch (const kopt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("another save into this directory"), std::string::npos)
          << e.what();
    }
    expect_loads(weights, ckpt, 1);
  }
  // Released on every exit path: after a failed save too.
  kopt::Impl::set_checkpoint_write_failure_after(10);
  EXPECT_THROW(a.opt->save(ckpt.string()), kopt::CheckpointError);
  kopt::Impl::set_checkpoint_write_failure_after(-1);
  a.opt->save(ckpt.string());
  expect_loads(a, ckpt, 2);
}

TEST(CheckpointFiles, AFifoOrDirectoryInPlaceOfAFileIsRefusedWithoutWaiting) {
  SavedOnce saved;
  auto& [dir, ckpt, a, weights] = saved;
  CheckpointModel victim = model();
  for (const bool index : {false, true}) {
    SCOPED_TRACE(index ? "index" : "data file");
    const fs::path bad = dir.path / (index ? "fifo-index" : "fifo-data");
    fs::copy(ckpt, bad);
    const fs::path file = index ? bad / "index.kopt" : data_file(bad);
    fs::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    try {
      victim.opt->load(bad.string());
      ADD_FAILURE() << "loaded";
    } catch (const kopt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
  const fs::path as_dir = dir.path / "dir-data";
  fs::copy(ckpt, as_dir);
  const fs::path file = data_file(as_dir);
  fs::remove(file);
  fs::create_directories(file);
  EXPECT_THROW(victim.opt->load(as_dir.string()), kopt::CheckpointError);
  EXPECT_EQ(victim.opt->step_count("p0"), 0);
}

TEST(CheckpointFiles, AMovedFromOptimizerDoesNotReplaceACheckpoint) {
  SavedOnce saved;
  auto& [dir, ckpt, a, weights] = saved;
  kopt::HybridOptimizer moved = std::move(*a.opt);
  try {
    a.opt->save(ckpt.string());
    ADD_FAILURE() << "a moved-from optimizer saved";
  } catch (const kopt::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.opt->load(ckpt.string()), kopt::InvalidArgument);
  EXPECT_THROW(a.opt->step(), kopt::InvalidArgument);
  expect_loads(weights, ckpt, 1);
  moved.save(ckpt.string());  // the optimizer it moved into saves as before (2 steps)
  expect_loads(a, ckpt, 2);
}

}  // namespace test_checkpoint_files
}  // namespace
