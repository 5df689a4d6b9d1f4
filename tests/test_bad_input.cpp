// Bad input gets a kopt::Error subclass with a clear message, and changes nothing.
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
