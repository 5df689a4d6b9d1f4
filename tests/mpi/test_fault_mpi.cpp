// A communicator failing at each collective call of a ZeRO-2 step in turn (on every rank at
// once: the calls are collective, so each rank counts the same). A failure before the update
// (the grads' reduce-scatter, the norm's all-gather) changes nothing; one after it (the
// all-gather of updated params) leaves the optimizer refusing to go on until load().
#include <gtest/gtest.h>
#include <mpi.h>

#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>

#include "../state_snapshot.hpp"
#include "shared_dir.hpp"

namespace {
namespace test_fault_mpi {

using kopt_test::CheckpointModel;
using kopt_test::SharedDir;

class FailingCommunicator final : public kopt::Communicator {
 public:
  std::int64_t calls = 0;
  std::int64_t fail_at = -1;  ///< the call that throws; -1: none

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_gather_bytes(const void* in, void* out, const std::vector<std::size_t>& bytes) override {
    tick("all_gather_bytes");
    inner_.all_gather_bytes(in, out, bytes);
  }
  void reduce_scatter_sum(const float* in, float* out, std::size_t count) override {
    tick("reduce_scatter_sum");
    inner_.reduce_scatter_sum(in, out, count);
  }

 private:
  void tick(const char* what) {
    if (calls++ == fail_at) throw kopt::BackendError(std::string("injected failure of ") + what);
  }
  kopt::MpiCommunicator inner_{MPI_COMM_WORLD};
};

CheckpointModel model(std::shared_ptr<kopt::Communicator> comm) {
  kopt::HybridOptions o{.max_grad_norm = 1.0,
                        .loss_scaling = kopt::LossScalerOptions{.init_scale = 1024}};
  o.sharding =
      kopt::ShardingOptions{std::move(comm), kopt::ZeroStage::two, kopt::GradReduction::average};
  std::vector<kopt_test::ParamDef> defs = kopt_test::mixed_defs(2);
  return CheckpointModel(defs, {kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true}},
                         {0, 1, 0, 1, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5, 6, 7}, o);
}

kopt_test::Snapshot snapshot(CheckpointModel& m) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const SharedDir dir;
  return kopt_test::take_snapshot(m, dir.path, rank);
}

TEST(CommunicatorFaults, BeforeTheUpdateNothingChangesAfterItTheOptimizerWaitsForLoad) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int before_update = 0, after_update = 0;
  for (std::int64_t k = 0; k < 20; ++k) {
    SCOPED_TRACE("collective call " + std::to_string(k) + " of the step fails");
    auto failing = std::make_shared<FailingCommunicator>();
    CheckpointModel m = model(failing);
    CheckpointModel twin = model(std::make_shared<kopt::MpiCommunicator>(MPI_COMM_WORLD));
    m.train(0, 2);
    twin.train(0, 2);
    const SharedDir good;
    m.opt->save(good.path);
    m.set_grads(2);
    twin.set_grads(2);
    failing->fail_at = failing->calls + k;
    bool threw = false;
    try {
      m.opt->step();
    } catch (const kopt::BackendError& e) {
      threw = std::string(e.what()).find("injected failure") != std::string::npos;
    }
    failing->fail_at = -1;
    if (!threw) break;  // past the step's last collective
    const SharedDir probe;
    bool refused = false;
    try {
      m.opt->save(probe.path);
    } catch (const kopt::InconsistentState&) {
      refused = true;
    }
    if (refused) {
      ++after_update;
      EXPECT_THROW(m.opt->step(), kopt::InconsistentState);
      m.copy_params_from(twin);  // the model's weights, from the training code's checkpoint
      EXPECT_NO_THROW(m.opt->load(good.path));
    } else {
      ++before_update;
    }
    EXPECT_TRUE(snapshot(m) == snapshot(twin));
    m.train(2, 2);
    twin.train(2, 2);
    EXPECT_TRUE(snapshot(m) == snapshot(twin));
  }
  // Before the update: the reduce-scatter of grads and the norm's all-gather; after it: the
  // all-gather of updated params. A world of one runs no collective in a step.
  EXPECT_GE(before_update, world > 1 ? 2 : 0);
  EXPECT_GE(after_update, world > 1 ? 1 : 0);
  if (world == 1) {
    EXPECT_EQ(before_update + after_update, 0);
  }
}

}  // namespace test_fault_mpi
}  // namespace
