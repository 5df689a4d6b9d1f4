#pragma once
// Everything a HybridOptimizer holds that a user can observe: params, step counts, loss
// scale, group configs, and every moment, amsgrad max and fp32 master (read through save(),
// whose data file carries them all). Two optimizers with equal snapshots behave the same.

#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint_model.hpp"

namespace kopt_test {

struct Snapshot {
  std::vector<std::vector<double>> params;
  std::vector<std::int64_t> steps;
  double loss_scale = 0;
  std::vector<kopt::AdamConfig> configs;
  std::vector<unsigned char> state;  ///< the data file past its header (which names the save)
  bool operator==(const Snapshot&) const = default;
};

inline std::vector<unsigned char> read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The state blocks of rank `rank`'s data file of the checkpoint in `dir`, past the header
// (which names the save, not the state).
inline std::vector<unsigned char> saved_state(const std::filesystem::path& dir, int rank = 0) {
  const std::string suffix = "-r" + std::to_string(rank) + ".kopt";
  std::vector<unsigned char> state;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("data-", 0) == 0 && file.size() > suffix.size() &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0) {
      state = read_bytes(entry.path());
      state.erase(state.begin(), state.begin() + std::min<std::size_t>(32, state.size()));
    }
  }
  EXPECT_FALSE(state.empty()) << "no data file of rank " << rank << " in " << dir;
  return state;
}

// `dir`: a directory shared by every rank of a sharded optimizer (save is collective).
inline Snapshot take_snapshot(CheckpointModel& m, const std::filesystem::path& dir, int rank = 0) {
  Snapshot s;
  for (std::size_t j = 0; j < m.defs.size(); ++j) {
    s.params.push_back(m.params[j].get());
    s.steps.push_back(m.opt->step_count(m.name(j)));
  }
  s.loss_scale = m.opt->loss_scale();
  for (std::size_t g = 0; g < m.opt->num_groups(); ++g)
    s.configs.push_back(m.opt->group(g).config());
  m.opt->save(dir.string());
  s.state = saved_state(dir, rank);
  return s;
}

inline Snapshot take_snapshot(CheckpointModel& m) {
  TempDir dir;
  return take_snapshot(m, dir.path);
}

}  // namespace kopt_test
