// Bad input gets a kopt::Error subclass with a clear message, and changes nothing.
#include <functional>
#include <utility>

#include "adam_case.hpp"

namespace {
namespace test_bad_input {

using namespace kopt_test;
using Host = Kokkos::DefaultHostExecutionSpace;

TEST(AdamConfigValidate, NamesTheFieldAndTheValue) {
  expect_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.lr = -1}.validate(); }, "lr = -1");
  expect_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.beta1 = 1.0}.validate(); },
                                      "beta1 = 1");
  expect_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.beta2 = -0.5}.validate(); },
                                      "beta2 = -0.5");
  expect_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.eps = 0}.validate(); }, "eps = 0");
  expect_error<kopt::InvalidArgument>(
      [] { kopt::AdamConfig{.weight_decay = std::nan("")}.validate(); }, "weight_decay = nan");
  expect_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.lr = INFINITY}.validate(); },
                                      "lr = inf");
  EXPECT_NO_THROW(kopt::AdamConfig{}.validate());
}

TEST(AdamConfigDefaults, AreTorchAdamW) {
  const kopt::AdamConfig c;
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.999);
  EXPECT_EQ(c.eps, 1e-8);
  EXPECT_EQ(c.weight_decay, 0.01);
  EXPECT_TRUE(c.decoupled);
  EXPECT_FALSE(c.amsgrad);
  EXPECT_TRUE(c.bias_correction);
  EXPECT_FALSE(c.maximize);
}

class BadInput : public ::testing::Test {
 protected:
  // One good param that has taken a step, so "nothing changed" is a real check.
  AdamCase<Host, float, float> c{{kopt::AdamConfig{}}, {13}};
  SpaceArray<float, Host> other{13};
  SpaceArray<double, Host> wide{13};
  std::vector<float> p_before;
  std::vector<double> m_before;

  void SetUp() override {
    c.step();
    snapshot();
  }
  void snapshot() {
    p_before = c.params[0]->download();
    m_before = to_host(c.opt.state(c.name(0)).exp_avg);
  }
  void expect_unchanged() {
    EXPECT_EQ(c.opt.size(), 1u);
    EXPECT_EQ(c.opt.step_count(c.name(0)), 1);
    EXPECT_EQ(c.params[0]->download(), p_before);
    EXPECT_EQ(to_host(c.opt.state(c.name(0)).exp_avg), m_before);
  }
};

TEST_F(BadInput, NullPointerWithNonzeroSize) {
  const kopt::Tensor null13(nullptr, 13, kopt::DType::f32);
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("w", null13, other.tensor()); },
                                      "param of 'w' is a null pointer with numel 13");
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("w", other.tensor(), null13); },
                                      "grad of 'w' is a null pointer with numel 13");
  expect_unchanged();
}

TEST_F(BadInput, UnsupportedDtype) {
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("w", wide.tensor(), other.tensor()); },
                                      "param of 'w' has dtype f64");
  expect_error<kopt::InvalidArgument>([&] { c.opt.set_grad(c.name(0), wide.tensor()); },
                                      "has dtype f64");
  expect_unchanged();
}

TEST_F(BadInput, MismatchedParamAndGradSizes) {
  SpaceArray<float, Host> small(7);
  expect_error<kopt::ShapeMismatch>([&] { c.opt.add("w", other.tensor(), small.tensor()); },
                                    "grad of 'w' has 7 elements but the param has 13");
  expect_error<kopt::ShapeMismatch>([&] { c.opt.set_grad(c.name(0), small.tensor()); },
                                    "has 7 elements");
  expect_unchanged();
}

TEST_F(BadInput, InvalidConfigAtAddGroupAndAtStep) {
  expect_error<kopt::InvalidArgument>([&] { c.opt.add_group(kopt::AdamConfig{.eps = -1}); },
                                      "eps = -1");
  EXPECT_EQ(c.opt.num_groups(), 1u);
  c.opt.config(0).beta2 = 1.5;  // a schedule gone wrong
  expect_error<kopt::InvalidArgument>([&] { c.opt.step(); }, "group 0");
  expect_unchanged();
  c.opt.config(0).beta2 = 0.999;
  EXPECT_NO_THROW(c.opt.step());
}

TEST_F(BadInput, NamesAndGroups) {
  expect_error<kopt::InvalidArgument>([&] { c.opt.add(c.name(0), other.tensor(), other.tensor()); },
                                      "already registered");
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("", other.tensor(), other.tensor()); },
                                      "non-empty name");
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("w", other.tensor(), other.tensor(), 3); },
                                      "names group 3");
  expect_error<kopt::InvalidArgument>([&] { c.opt.set_grad("nope", other.tensor()); },
                                      "no parameter named 'nope'");
  expect_error<kopt::InvalidArgument>([&] { c.opt.config(2); }, "group 2 does not exist");
  expect_unchanged();
}

TEST_F(BadInput, NonFiniteGradScale) {
  expect_error<kopt::InvalidArgument>([&] { c.opt.step(std::nan("")); }, "grad_scale");
  expect_error<kopt::InvalidArgument>([&] { c.opt.step(INFINITY); }, "grad_scale");
  expect_unchanged();
}

TEST_F(BadInput, MemoryTheEngineCannotReach) {
  const kopt::Tensor on_device(other.view.data(), 13, kopt::DType::f32, kopt::MemorySpace::cuda);
  expect_error<kopt::NotCompiled>([&] { c.opt.add("w", on_device, other.tensor()); },
                                  "memory space 'cuda'");
  expect_unchanged();
}

TEST_F(BadInput, AnUnknownMemorySpaceIsInvalidNotMissing) {
  const kopt::Tensor odd(other.view.data(), 13, kopt::DType::f32,
                         static_cast<kopt::MemorySpace>(9));
  expect_error<kopt::InvalidArgument>([&] { c.opt.add("w", odd, other.tensor()); },
                                      "memory space 9, which is not a kopt::MemorySpace");
  expect_unchanged();
}

// A moved-from engine holds no params: it refuses every call that would act on them (a step
// would update nothing, a name would be "unknown") naming the move, and the engine it moved
// to carries on bitwise as a twin that never moved.
TEST_F(BadInput, AMovedFromEngineRefusesItsCallsAndTheMovedToOneCarriesOn) {
  AdamCase<Host, float, float> twin{{kopt::AdamConfig{}}, {13}};
  twin.step();
  kopt::FusedAdam<Host> moved = std::move(c.opt);
  const std::string w = c.name(0);
  std::vector<float> span(13);
  kopt::Impl::StateArrays<float> out{};
  out[0] = span.data();
  kopt::Impl::StateArrays<const float> in{};
  in[0] = span.data();
  const std::vector<std::pair<std::string, std::function<void()>>> calls{
      {"step", [&] { c.opt.step(); }},
      {"prepare_step", [&] { c.opt.prepare_step(); }},
      {"add", [&] { c.opt.add("w", other.tensor(), other.tensor()); }},
      {"add_group", [&] { c.opt.add_group(kopt::AdamConfig{}); }},
      {"set_grad", [&] { c.opt.set_grad(w, other.tensor()); }},
      {"rebind", [&] { c.opt.rebind(w, other.tensor(), other.tensor()); }},
      {"config", [&] { c.opt.config(0); }},
      {"step_count", [&] { c.opt.step_count(w); }},
      {"numel", [&] { c.opt.numel(w); }},
      {"state", [&] { c.opt.state(w); }},
      {"read_state", [&] { c.opt.read_state(w, 0, 13, out); }},
      {"write_state", [&] { c.opt.write_state(w, 0, 13, in); }},
      {"commit_state", [&] { c.opt.commit_state(w, 1); }},
      {"tensor_state", [&] { c.opt.tensor_state(w); }},
      {"keep_state_arrays", [&] { c.opt.keep_state_arrays(1); }},
      {"reload_model_params", [&] { c.opt.reload_model_params(); }},
      {"grad_sum_of_squares", [&] { c.opt.grad_sum_of_squares(); }},
  };
  for (const auto& [call, bad] : calls)
    expect_error<kopt::InvalidArgument>(
        bad, "kopt::FusedOptimizer::" + call + ": this optimizer was moved from");
  EXPECT_EQ(c.opt.size(), 0u);
  EXPECT_EQ(c.opt.state_bytes(), 0u);  // the moved-to engine's arrays are not counted twice
  EXPECT_EQ(c.opt.workspace_bytes(), 0u);
  EXPECT_GT(moved.state_bytes(), 0u);
  EXPECT_EQ(to_host(moved.state(w).exp_avg), m_before);
  EXPECT_EQ(moved.step_count(w), 1);
  for (auto* g : {c.grads[0].get(), twin.grads[0].get()}) {
    g->host.assign(13, 0.25f);
    g->upload();
  }
  moved.step();
  twin.opt.step();
  Kokkos::fence();
  EXPECT_EQ(c.params[0]->download(), twin.params[0]->download());
  // A self-move leaves the engine moved-from, and it says so.
  kopt::FusedAdam<Host>& same = moved;
  moved = std::move(same);
  expect_error<kopt::InvalidArgument>([&] { moved.step(); }, "was moved from");
}

TEST(KoptError, MessagesCarryFileNameAndLine) {
  try {
    kopt::AdamConfig{.lr = -2}.validate();
    FAIL();
  } catch (const kopt::Error& e) {  // the file's name only: no directory of the build machine
    EXPECT_NE(std::string(e.what()).find("[adam_config.cpp:"), std::string::npos) << e.what();
  }
}

}  // namespace test_bad_input
}  // namespace
