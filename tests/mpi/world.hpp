#pragma once
// MPI_COMM_WORLD as the MPI tests see it: this rank, the world size, and options sharded
// over it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>
#include <memory>
#include <string>
#include <vector>

#include "../buffer.hpp"

namespace kopt_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// `options` sharded over MPI_COMM_WORLD at `stage`, grads reduced by `reduction`.
inline kopt::HybridOptions sharded(kopt::HybridOptions options, kopt::ZeroStage stage,
                                   kopt::GradReduction reduction = kopt::GradReduction::sum) {
  options.sharding = kopt::ShardingOptions{std::make_shared<kopt::MpiCommunicator>(MPI_COMM_WORLD),
                                           stage, reduction};
  return options;
}

/// Three params (1001 f32, 517 bf16, 37 f32 elements), the first two cut by the training code
/// (this rank holds [cut(n, rank), cut(n, rank + 1))), the third whole for kopt to cut: the
/// whole tensors for a one-process run (`whole`) and this rank's parts (`parts`), both with
/// lr 1e-2, the params drawn from `random(n)`.
struct PreshardedModel {
  static constexpr std::int64_t sizes[3] = {1001, 517, 37};
  static constexpr kopt::DType types[3] = {kopt::DType::f32, kopt::DType::bf16, kopt::DType::f32};
  std::vector<Buffer> full_p, full_g, part_p, part_g;
  std::vector<std::int64_t> lo = std::vector<std::int64_t>(3), len = std::vector<std::int64_t>(3);
  kopt::ParamGroup whole{kopt::AdamConfig{.lr = 1e-2}}, parts{kopt::AdamConfig{.lr = 1e-2}};

  template <class Cut, class Random>
  PreshardedModel(const Cut& cut, const Random& random) {
    const int me = world_rank();
    for (std::size_t j = 0; j < 3; ++j) {
      const bool cut_by_caller = j < 2;
      lo[j] = cut_by_caller ? cut(sizes[j], me) : 0;
      len[j] = cut_by_caller ? cut(sizes[j], me + 1) - lo[j] : sizes[j];
      const std::vector<double> init = random(sizes[j]);
      full_p.emplace_back(types[j], false, static_cast<std::size_t>(sizes[j]));
      full_g.emplace_back(types[j], false, static_cast<std::size_t>(sizes[j]));
      part_p.emplace_back(types[j], false, static_cast<std::size_t>(len[j]));
      part_g.emplace_back(types[j], false, static_cast<std::size_t>(len[j]));
      full_p[j].set(init);
      part_p[j].set(slice(j, init));
      const std::string name = "w" + std::to_string(j);
      whole.add(name, full_p[j].tensor(), full_g[j].tensor());
      kopt::Tensor p = part_p[j].tensor(), g = part_g[j].tensor();
      if (cut_by_caller) {
        p = p.shard_of(sizes[j], lo[j]);
        g = g.shard_of(sizes[j], lo[j]);
      }
      parts.add(name, p, g);
    }
  }

  /// This rank's part of a whole tensor's values.
  std::vector<double> slice(std::size_t j, const std::vector<double>& all) const {
    return std::vector<double>(all.begin() + lo[j], all.begin() + lo[j] + len[j]);
  }
  /// Grad `g` of param j into the whole tensor and this rank's part.
  void set_grad(std::size_t j, const std::vector<double>& g) {
    full_g[j].set(g);
    part_g[j].set(slice(j, g));
  }
  /// Every part holds the same values as its slice of the whole tensor.
  void expect_parts_match() {
    for (std::size_t j = 0; j < 3; ++j)
      EXPECT_EQ(part_p[j].get(), slice(j, full_p[j].get())) << "w" << j;
  }
};

}  // namespace kopt_test
