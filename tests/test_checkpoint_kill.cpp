// A save killed with SIGKILL at random points never loses data. A child process (this test
// binary, run as `kopt_tests --kopt-save-loop DIR`) trains and saves into one directory, a
// newer state each time, until it is killed; after each kill the directory loads, and what it
// loads is bitwise the state of one of the child's saves (the last one that finished, or the
// one it was writing when the index landed). One group's state is offloaded, one is not.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>
#include <random>
#include <thread>

#include "checkpoint_model.hpp"

extern char** environ;

namespace kopt_test {

// Eight mixed params; group 1's state offloaded to the host.
static CheckpointModel kill_model() {
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 3};
  return CheckpointModel(mixed_defs(2), {kopt::AdamConfig{}, kopt::AdamConfig{.lr = 2e-3}},
                         {0, 1, 0, 1, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5, 6, 7}, o, {false, true});
}

// The child: never returns; killed by the test.
int save_loop(const char* dir) {
  Kokkos::ScopeGuard kokkos;
  CheckpointModel m = kill_model();
  for (int s = 0;; ++s) {
    m.train(s, 1);
    m.opt->save(dir);
  }
}

}  // namespace kopt_test

namespace {
namespace test_checkpoint_kill {

namespace fs = std::filesystem;
using namespace kopt_test;
using Bytes = std::vector<unsigned char>;

// Everything a checkpoint holds of the optimizer, in bytes: its data file past the header
// (every state array of every param), then every param's step count and the loss scaler.
Bytes state_of(const fs::path& dir) {
  const kopt::Impl::Index index = kopt::Impl::parse_index(read_all(dir / "index.kopt"), "index");
  Bytes out = read_all(dir / kopt::Impl::data_file_name(index.generation, 0));
  out.erase(out.begin(), out.begin() + kopt::Impl::kDataHeaderBytes);
  const auto put = [&](const void* p, std::size_t n) {
    out.insert(out.end(), static_cast<const unsigned char*>(p),
               static_cast<const unsigned char*>(p) + n);
  };
  for (const auto& p : index.params) put(&p.step, sizeof p.step);
  put(&index.scale, sizeof index.scale);
  put(&index.growth_tracker, sizeof index.growth_tracker);
  return out;
}

TEST(CheckpointKill, ASaveKilledAtRandomPointsLeavesAWholeCheckpoint) {
  TempDir dir;
  const fs::path ckpt = dir.path / "ckpt";
  // The reference: the same training in this process, each step's state and weights.
  CheckpointModel ref = kill_model();
  std::vector<Bytes> states;  // [t]: after t + 1 calls of train()
  std::vector<std::vector<std::vector<double>>> weights;
  const auto reference = [&](std::size_t calls) {
    while (states.size() < calls) {
      ref.train(static_cast<int>(states.size()), 1);
      ref.opt->save(dir.str("ref"));
      states.push_back(state_of(dir.path / "ref"));
      weights.emplace_back();
      for (auto& p : ref.params) weights.back().push_back(p.get());
    }
  };
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const auto spawn = [&] {
    std::string a0 = self, a1 = "--kopt-save-loop", a2 = ckpt.string();
    char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
    pid_t child = 0;
    EXPECT_EQ(::posix_spawn(&child, self.c_str(), nullptr, nullptr, argv, environ), 0);
    return child;
  };
  const auto kill_child = [&](pid_t child) {
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child stopped on its own: status " << status;
  };
  // How long a child takes to its first save (a sanitizer build starts slower): the kills
  // come from then on, so that they fall inside saves rather than before the first one.
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t first = spawn();
  while (!fs::exists(ckpt / "index.kopt") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto startup =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  kill_child(first);
  ASSERT_TRUE(fs::exists(ckpt / "index.kopt")) << "the child saved nothing in 60 s";
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> delay_ms(0, 250);
  for (int kills = 0; kills < 100; ++kills) {
    const pid_t child = spawn();
    std::this_thread::sleep_for(startup + std::chrono::milliseconds(delay_ms(rng)));
    kill_child(child);
    SCOPED_TRACE("kill " + std::to_string(kills));
    // Which of the child's saves it is: the reference state it equals, bitwise (a step the
    // loss scaler skipped advances no step count, so search by state, not by count).
    const Bytes saved = state_of(ckpt);
    const auto index = kopt::Impl::parse_index(read_all(ckpt / "index.kopt"), "index");
    const auto most = static_cast<std::size_t>(4 * index.params.at(0).step + 64);
    std::size_t t = 0;
    for (reference(1); states[t] != saved; reference(++t + 1))
      ASSERT_LT(t, most) << "the directory holds no state the child saved";
    // It loads: the weights of that save (the training code's own checkpoint), then the
    // optimizer's, give exactly that state again.
    CheckpointModel fresh = kill_model();
    for (std::size_t j = 0; j < fresh.params.size(); ++j) fresh.params[j].set(weights[t][j]);
    fresh.opt->load(ckpt.string());
    fresh.opt->save(dir.str("resaved"));
    ASSERT_EQ(state_of(dir.path / "resaved"), saved) << "save " << t + 1;
  }
}

}  // namespace test_checkpoint_kill
}  // namespace
