#pragma once
// A model for checkpoint tests: params registered in any order and grouping, with grads
// that depend only on (step, param), so two models can be stepped on the same data.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <kopt/impl/checkpoint_format.hpp>
#include <memory>
#include <random>

#include "hybrid_world.hpp"

namespace kopt_test {

struct CheckpointModel {
  std::vector<ParamDef> defs;
  std::vector<Buffer> params, grads;
  std::unique_ptr<kopt::HybridOptimizer> opt;

  // Param j goes into group groups_of[j] (config configs[groups_of[j]]), registered in the
  // order `order`; groups listed in `host_state` are offloaded.
  CheckpointModel(std::vector<ParamDef> ds, const std::vector<kopt::AdamConfig>& configs,
                  const std::vector<std::size_t>& groups_of, const std::vector<std::size_t>& order,
                  const kopt::HybridOptions& options, const std::vector<bool>& host_state = {})
      : defs(std::move(ds)) {
    std::vector<kopt::ParamGroup> groups;
    for (std::size_t g = 0; g < configs.size(); ++g)
      groups.emplace_back(configs[g], g < host_state.size() && host_state[g]
                                          ? kopt::StatePlacement::host
                                          : kopt::StatePlacement::with_params);
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> dist(-1, 1);
    for (const ParamDef& d : defs) {
      params.emplace_back(d.param, d.on_device, d.n);
      grads.emplace_back(d.grad, d.on_device, d.n);
      std::vector<double> v(d.n);
      for (double& x : v) x = dist(rng);
      params.back().set(v);
    }
    for (const std::size_t j : order)
      groups[groups_of[j]].add(name(j), params[j].tensor(), grads[j].tensor());
    opt = std::make_unique<kopt::HybridOptimizer>(std::move(groups), options);
  }
  static std::string name(std::size_t j) { return "p" + std::to_string(j); }
  void set_grads(int step) {
    for (std::size_t j = 0; j < defs.size(); ++j) {
      std::mt19937 rng(static_cast<unsigned>(1000 * step + j));
      std::uniform_real_distribution<double> dist(-1, 1);
      std::vector<double> g(defs[j].n);
      for (double& x : g) x = dist(rng) * opt->loss_scale();
      grads[j].set(g);
    }
  }
  void train(int first_step, int steps) {
    for (int s = first_step; s < first_step + steps; ++s) {
      set_grads(s);
      opt->step();
    }
  }
  // The model weights, as a model checkpoint would carry them.
  void copy_params_from(CheckpointModel& other) {
    for (std::size_t j = 0; j < defs.size(); ++j) params[j].set(other.params[j].get());
  }
  void expect_same(CheckpointModel& other) {
    for (std::size_t j = 0; j < defs.size(); ++j) {
      EXPECT_EQ(params[j].get(), other.params[j].get()) << name(j);
      EXPECT_EQ(opt->step_count(name(j)), other.opt->step_count(name(j))) << name(j);
    }
    EXPECT_EQ(opt->loss_scale(), other.opt->loss_scale());
  }
};

// A file's bytes; bytes written as a file (replacing it).
inline std::vector<unsigned char> read_all(const std::filesystem::path& p) {
  return kopt::Impl::read_file(p.string());
}
inline void write_all(const std::filesystem::path& p, const std::vector<unsigned char>& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
// The (first) data file of a checkpoint directory.
inline std::filesystem::path data_file(const std::filesystem::path& dir) {
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.path().filename().string().rfind("data-", 0) == 0) return f.path();
  return {};
}

// A fresh directory under the system's temporary one, removed at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("kopt-test-" + std::to_string(std::random_device{}()) + "-" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

}  // namespace kopt_test
