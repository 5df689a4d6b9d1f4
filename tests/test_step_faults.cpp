// Exception safety of step(): a failure injected at every allocation a step makes, and at
// every copy of the offload pipeline. Before the update starts a failure changes nothing
// (full state snapshot against a twin that never failed); once it has started the optimizer
// refuses step(), save() and reload_model_params() until a load(), and a load() recovers it.
#include <functional>
#include <kopt/impl/copy_queue.hpp>
#include <kopt/impl/fault_injection.hpp>

#include "state_snapshot.hpp"
#include "test_support.hpp"

namespace {
namespace test_step_faults {

using namespace kopt_test;
using kopt::DType;

// Three engines: f32 and 16-bit params on the host, and an offloaded group whose pipeline
// runs in chunks of 1,024 elements (several copies per step); clipping and loss scaling on
// unless `plain` (then no norm pass runs before the updates).
std::unique_ptr<CheckpointModel> make_model(bool plain = false) {
  kopt::HybridOptions options{.max_grad_norm = 1.0,
                              .loss_scaling = kopt::LossScalerOptions{.init_scale = 1024}};
  if (plain) options = kopt::HybridOptions{};
  options.offload.chunk_elements = 1024;
  return std::make_unique<CheckpointModel>(
      std::vector<ParamDef>{{0, DType::f32, DType::f32, false, 1000},
                            {0, DType::bf16, DType::bf16, false, 777},
                            {0, DType::f16, DType::f16, false, 33},
                            {0, DType::bf16, DType::f32, true, 5000},
                            {0, DType::f32, DType::f32, true, 1}},
      std::vector<kopt::AdamConfig>{kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true},
                                    kopt::AdamConfig{.weight_decay = 0}},
      std::vector<std::size_t>{0, 1, 0, 2, 2}, std::vector<std::size_t>{0, 1, 2, 3, 4}, options,
      std::vector<bool>{false, false, true});
}

// Runs `phase` on a model and its twin, then step() on the model with allocation number k
// failing, for k = 0, 1, ... until a step needs no more: each failed step leaves the model
// equal to its twin, and both then train on alike.
void fail_every_allocation(const std::function<void(CheckpointModel&)>& phase, int first_step,
                           int expected_allocations, bool plain = false) {
  int failures = 0;
  for (std::int64_t k = 0;; ++k) {
    SCOPED_TRACE("allocation " + std::to_string(k) + " fails");
    auto model = make_model(plain), twin = make_model(plain);
    phase(*model);
    phase(*twin);
    model->set_grads(first_step);
    kopt::Impl::set_allocation_failure_after(k);
    bool threw = false;
    try {
      model->opt->step();
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    kopt::Impl::set_allocation_failure_after(-1);
    if (!threw) break;  // k is past the step's last allocation
    ++failures;
    twin->set_grads(first_step);
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
    model->train(first_step, 3);
    twin->train(first_step, 3);
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
  }
  EXPECT_GE(failures, expected_allocations) << "the step made fewer allocations than expected";
}

TEST(StepFaults, AnAllocationFailingInTheFirstStepChangesNothing) {
  // State of three engines, their chunk tables, the offload pipeline's staging buffers.
  fail_every_allocation([](CheckpointModel&) {}, 0, 10);
}

TEST(StepFaults, AnAllocationFailingInTheFirstStepWithoutClippingChangesNothing) {
  // No norm pass: the engines' own allocations are the first thing a step does.
  fail_every_allocation([](CheckpointModel&) {}, 0, 10, true);
}

TEST(StepFaults, AnAllocationFailingWhenTheSetOfGradsChangesChangesNothing) {
  // Three steps, then p0 frozen: the host engine builds new chunk tables (update + norm).
  fail_every_allocation(
      [](CheckpointModel& m) {
        m.train(0, 3);
        m.opt->set_grad(m.name(0), kopt::Tensor{});
      },
      3, 2);
}

TEST(StepFaults, AFailedOffloadCopyMakesTheOptimizerRefuseToGoOnUntilLoad) {
  int failures = 0;
  for (std::int64_t k : {0, 1, 4, 7, 10}) {  // ~12 copies per step: grads in, params out
    SCOPED_TRACE("offload copy " + std::to_string(k) + " fails");
    auto model = make_model(), twin = make_model();
    model->train(0, 3);
    twin->train(0, 3);
    TempDir good;
    model->opt->save(good.str());
    const auto good_files = read_bytes(good.path / "index.kopt");
    model->set_grads(3);
    kopt::Impl::set_host_copy_failure_after(k);
    bool threw = false;
    try {
      model->opt->step();
    } catch (const kopt::BackendError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("offload copy failed"), std::string::npos) << e.what();
    }
    kopt::Impl::set_host_copy_failure_after(-1);
    ASSERT_TRUE(threw) << "a failed copy went unreported";
    ++failures;
    const std::string needle = "a step failed after its update began";
    expect_error<kopt::InconsistentState>([&] { model->opt->step(); }, needle);
    expect_error<kopt::InconsistentState>([&] { model->opt->reload_model_params(); }, needle);
    TempDir other;
    expect_error<kopt::InconsistentState>([&] { model->opt->save(good.str()); }, needle);
    expect_error<kopt::InconsistentState>([&] { model->opt->save(other.str()); }, needle);
    EXPECT_EQ(read_bytes(good.path / "index.kopt"), good_files);  // the good one is intact
    // Recovery: the model weights from the model's own checkpoint, the optimizer's from ours.
    model->copy_params_from(*twin);
    model->opt->load(good.str());
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
    model->train(3, 2);
    twin->train(3, 2);
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
  }
  EXPECT_EQ(failures, 5);
}

// A partial load ends the refusals too, whether the file covers every param or not: the
// params it lacks start afresh (step count 0), so no param keeps a half-updated state.
TEST(StepFaults, APartialLoadEndsTheFailedState) {
  for (const bool covers : {true, false}) {
    SCOPED_TRACE(covers ? "the file covers every param" : "the file lacks the offloaded ones");
    auto model = make_model();
    model->train(0, 1);
    TempDir good;
    if (covers) {
      model->opt->save(good.str());
    } else {
      CheckpointModel less({model->defs.begin(), model->defs.begin() + 3},
                           {kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true}}, {0, 1, 0},
                           {0, 1, 2}, kopt::HybridOptions{});
      less.train(0, 2);
      less.opt->save(good.str());
    }
    model->set_grads(1);
    kopt::Impl::set_host_copy_failure_after(0);
    EXPECT_THROW(model->opt->step(), kopt::BackendError);
    kopt::Impl::set_host_copy_failure_after(-1);
    EXPECT_THROW(model->opt->step(), kopt::InconsistentState);
    model->opt->load(good.str(), kopt::LoadOptions{.partial = true});
    EXPECT_EQ(model->opt->step_count("p3"), covers ? 1 : 0);
    EXPECT_EQ(model->opt->step_count("p0"), covers ? 1 : 2);
    model->set_grads(1);
    EXPECT_NO_THROW(model->opt->step());
    EXPECT_EQ(model->opt->step_count("p3"), covers ? 2 : 1);
  }
}

}  // namespace test_step_faults
}  // namespace
