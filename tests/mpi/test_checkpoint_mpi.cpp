// Sharded checkpoints: each rank writes its shard, rank 0 the index; the checkpoint loads at
// any other world size (here: the whole world, pairs of ranks, each rank alone) and into
// another placement, and training resumes bitwise.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>

#include "../checkpoint_model.hpp"
#include "shared_dir.hpp"

namespace {
namespace test_checkpoint_mpi {

using kopt_test::CheckpointModel;
using kopt_test::SharedDir;

kopt::HybridOptions options(MPI_Comm comm, kopt::ZeroStage stage) {
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 2};
  if (comm != MPI_COMM_NULL)
    o.sharding = kopt::ShardingOptions{std::make_shared<kopt::MpiCommunicator>(comm), stage,
                                       kopt::GradReduction::sum};
  return o;
}

const std::vector<kopt::AdamConfig> kConfigs = {kopt::AdamConfig{},
                                                kopt::AdamConfig{.lr = 3e-3, .amsgrad = true},
                                                kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.0}};

CheckpointModel model(MPI_Comm comm, const std::vector<bool>& offloaded) {
  std::vector<kopt_test::ParamDef> defs = kopt_test::mixed_defs(2);
  defs.push_back(kopt_test::ParamDef{2, kopt::DType::bf16, kopt::DType::bf16, false, 3});
  return CheckpointModel(defs, kConfigs, {0, 1, 2, 0, 1, 2, 0, 1, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8},
                         options(comm, kopt::ZeroStage::one), offloaded);
}

// Saved and loaded in spans of `span` floats (0: the default): a rank's piece of a param
// starts and ends inside the blocks of another world size, and inside spans.
void expect_loads_at_other_world_sizes(std::int64_t span) {
  kopt::Impl::set_checkpoint_span_floats(span);
  const SharedDir dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CheckpointModel saved = model(MPI_COMM_WORLD, {false, false, true});
  saved.train(0, 3);
  saved.opt->save(dir.path);
  // Pairs of ranks, and each rank alone (no communicator): other world sizes, and group 1
  // offloaded instead of group 2.
  MPI_Comm pairs = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pairs);
  CheckpointModel in_pairs = model(pairs, {false, true, false});
  CheckpointModel alone = model(MPI_COMM_NULL, {});
  for (CheckpointModel* m : {&in_pairs, &alone}) {
    m->copy_params_from(saved);
    // Never let one rank leave the test early: later collectives would wait for it.
    EXPECT_NO_THROW(m->opt->load(dir.path));
  }
  saved.train(3, 3);
  for (CheckpointModel* m : {&in_pairs, &alone}) {
    m->train(3, 3);
    saved.expect_same(*m);
  }
  MPI_Comm_free(&pairs);
  kopt::Impl::set_checkpoint_span_floats(0);
}

TEST(ShardedCheckpoint, LoadsAtOtherWorldSizesAndResumesBitwise) {
  expect_loads_at_other_world_sizes(0);
}

TEST(ShardedCheckpoint, LoadsAtOtherWorldSizesInSpansOfFiveFloats) {
  expect_loads_at_other_world_sizes(5);
}

TEST(ShardedCheckpoint, ACheckpointFromOneProcessLoadsSharded) {
  const SharedDir dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CheckpointModel one = model(MPI_COMM_NULL, {});
  one.train(0, 2);
  if (rank == 0) one.opt->save(dir.path);
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointModel sharded = model(MPI_COMM_WORLD, {true, false, false});
  sharded.copy_params_from(one);
  EXPECT_NO_THROW(sharded.opt->load(dir.path));
  one.train(2, 3);
  sharded.train(2, 3);
  one.expect_same(sharded);
}

TEST(ShardedCheckpoint, AMissingRankFileFailsOnEveryRankAndChangesNothing) {
  const SharedDir dir;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CheckpointModel a = model(MPI_COMM_WORLD, {});
  a.train(0, 2);
  a.opt->save(dir.path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)  // the last rank's file: at 1 rank, the only one
    for (const auto& f : std::filesystem::directory_iterator(dir.path))
      if (f.path().filename().string().find("-r" + std::to_string(world - 1) + ".kopt") !=
          std::string::npos)
        std::filesystem::remove(f.path());
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointModel victim = model(MPI_COMM_WORLD, {}), twin = model(MPI_COMM_WORLD, {});
  victim.train(0, 1);
  twin.train(0, 1);
  EXPECT_THROW(victim.opt->load(dir.path), kopt::CheckpointError);
  victim.train(1, 2);
  twin.train(1, 2);
  victim.expect_same(twin);
}

}  // namespace test_checkpoint_mpi
}  // namespace
