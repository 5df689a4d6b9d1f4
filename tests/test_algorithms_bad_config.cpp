// Invalid SGD, Lion, Adagrad, LAMB, Muon and Adafactor configs (and LAMB where it does not run
// yet): every invalid field is refused with its name and value, by validate(), by ParamGroup's
// constructor, by the fused engine, and by step() after a schedule changed it, which then changes
// nothing.
#include <functional>
#include <kopt/impl/fused_optimizer_def.hpp>

#include "algorithm_world.hpp"
#include "test_support.hpp"

namespace {
namespace test_algorithms_bad_config {

using namespace kopt_test;
using kopt::DType;

template <class C>
struct BadCase {
  std::function<void(C&)> spoil;  // makes a valid config invalid in one field
  std::string needle;             // what the message must say
};

std::vector<BadCase<kopt::SgdConfig>> bad_sgd() {
  using C = kopt::SgdConfig;
  return {
      {[](C& c) { c.lr = -1; }, "SgdConfig.lr = -1"},
      {[](C& c) { c.lr = NAN; }, "SgdConfig.lr = nan"},
      {[](C& c) { c.lr = INFINITY; }, "SgdConfig.lr = inf"},
      {[](C& c) { c.momentum = -0.5; }, "SgdConfig.momentum = -0.5"},
      {[](C& c) { c.momentum = NAN; }, "SgdConfig.momentum = nan"},
      {[](C& c) { c.dampening = NAN; }, "SgdConfig.dampening = nan"},
      {[](C& c) { c.dampening = -INFINITY; }, "SgdConfig.dampening = -inf"},
      {[](C& c) { c.weight_decay = -0.01; }, "SgdConfig.weight_decay = -0.01"},
      {[](C& c) { c.weight_decay = INFINITY; }, "SgdConfig.weight_decay = inf"},
      {[](C& c) { c.momentum = 0, c.nesterov = true; }, "SgdConfig.nesterov = true"},
      {[](C& c) { c.momentum = 0.9, c.dampening = 0.1, c.nesterov = true; },
       "SgdConfig.nesterov = true is invalid with momentum = 0.9 and dampening = 0.1"},
  };
}
std::vector<BadCase<kopt::LionConfig>> bad_lion() {
  using C = kopt::LionConfig;
  return {
      {[](C& c) { c.lr = -1; }, "LionConfig.lr = -1"},
      {[](C& c) { c.lr = NAN; }, "LionConfig.lr = nan"},
      {[](C& c) { c.beta1 = -0.1; }, "LionConfig.beta1 = -0.1"},
      {[](C& c) { c.beta1 = 1.1; }, "LionConfig.beta1 = 1.1"},
      {[](C& c) { c.beta1 = NAN; }, "LionConfig.beta1 = nan"},
      {[](C& c) { c.beta2 = 1.5; }, "LionConfig.beta2 = 1.5"},
      {[](C& c) { c.beta2 = -0.5; }, "LionConfig.beta2 = -0.5"},
      {[](C& c) { c.weight_decay = -1; }, "LionConfig.weight_decay = -1"},
      {[](C& c) { c.weight_decay = INFINITY; }, "LionConfig.weight_decay = inf"},
  };
}
std::vector<BadCase<kopt::AdagradConfig>> bad_adagrad() {
  using C = kopt::AdagradConfig;
  return {
      {[](C& c) { c.lr = -1; }, "AdagradConfig.lr = -1"},
      {[](C& c) { c.lr = INFINITY; }, "AdagradConfig.lr = inf"},
      {[](C& c) { c.lr_decay = -0.1; }, "AdagradConfig.lr_decay = -0.1"},
      {[](C& c) { c.lr_decay = NAN; }, "AdagradConfig.lr_decay = nan"},
      {[](C& c) { c.weight_decay = -1; }, "AdagradConfig.weight_decay = -1"},
      {[](C& c) { c.initial_accumulator_value = -0.1; },
       "AdagradConfig.initial_accumulator_value = -0.1"},
      {[](C& c) { c.eps = -1e-10; }, "AdagradConfig.eps = -1e-10"},
      {[](C& c) { c.eps = NAN; }, "AdagradConfig.eps = nan"},
  };
}

std::vector<BadCase<kopt::LambConfig>> bad_lamb() {
  using C = kopt::LambConfig;
  return {
      {[](C& c) { c.lr = -1; }, "LambConfig.lr = -1"},
      {[](C& c) { c.beta1 = 1.0; }, "LambConfig.beta1 = 1"},
      {[](C& c) { c.beta2 = NAN; }, "LambConfig.beta2 = nan"},
      {[](C& c) { c.eps = 0; }, "LambConfig.eps = 0"},
      {[](C& c) { c.weight_decay = -0.1; }, "LambConfig.weight_decay = -0.1"},
      {[](C& c) { c.min_trust = -1; }, "LambConfig.min_trust = -1"},
      {[](C& c) { c.max_trust = 0.001; }, "LambConfig.max_trust = 0.001"},  // below min_trust
      {[](C& c) { c.max_trust = INFINITY; }, "LambConfig.max_trust = inf"},
  };
}

std::vector<BadCase<kopt::MuonConfig>> bad_muon() {
  using C = kopt::MuonConfig;
  return {
      {[](C& c) { c.lr = -1; }, "MuonConfig.lr = -1"},
      {[](C& c) { c.weight_decay = NAN; }, "MuonConfig.weight_decay = nan"},
      {[](C& c) { c.momentum = -0.5; }, "MuonConfig.momentum = -0.5"},
      {[](C& c) { c.ns_a = INFINITY; }, "MuonConfig.ns_a = inf"},
      {[](C& c) { c.ns_b = NAN; }, "MuonConfig.ns_b = nan"},
      {[](C& c) { c.ns_c = -INFINITY; }, "MuonConfig.ns_c = -inf"},
      {[](C& c) { c.eps = 0; }, "MuonConfig.eps = 0"},
      {[](C& c) { c.ns_steps = 100; }, "MuonConfig.ns_steps = 100"},  // torch: < 100
      {[](C& c) { c.ns_steps = 2.5; }, "MuonConfig.ns_steps = 2.5"},
      {[](C& c) { c.ns_steps = -1; }, "MuonConfig.ns_steps = -1"},
  };
}

std::vector<BadCase<kopt::AdafactorConfig>> bad_adafactor() {
  using C = kopt::AdafactorConfig;
  return {
      {[](C& c) { c.lr = -1; }, "AdafactorConfig.lr = -1"},
      {[](C& c) { c.beta2_decay = 0.1; }, "AdafactorConfig.beta2_decay = 0.1"},  // torch: <= 0
      {[](C& c) { c.beta2_decay = -INFINITY; }, "AdafactorConfig.beta2_decay = -inf"},
      {[](C& c) { c.eps1 = -1e-30; }, "AdafactorConfig.eps1 = -1e-30"},
      {[](C& c) { c.eps2 = NAN; }, "AdafactorConfig.eps2 = nan"},
      {[](C& c) { c.d = 0.5; }, "AdafactorConfig.d = 0.5"},  // torch: >= 1
      {[](C& c) { c.weight_decay = -0.1; }, "AdafactorConfig.weight_decay = -0.1"},
  };
}

// Valid configs with every switch on that the spoilers do not need off.
kopt::SgdConfig good(kopt::SgdConfig) { return {.lr = 0.05, .momentum = 0.0}; }
kopt::LionConfig good(kopt::LionConfig) { return {.lr = 1e-3, .weight_decay = 0.1}; }
kopt::LambConfig good(kopt::LambConfig) { return {.lr = 1e-3, .clamp_trust = true}; }
kopt::MuonConfig good(kopt::MuonConfig) { return {.lr = 1e-2, .match_rms_adamw = true}; }
kopt::AdafactorConfig good(kopt::AdafactorConfig) {
  return {.lr = 1e-2, .d = 2.0, .weight_decay = 0.01, .maximize = true};
}
kopt::AdagradConfig good(kopt::AdagradConfig) {
  return {.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1};
}

template <class C>
void expect_refused_everywhere(const std::vector<BadCase<C>>& cases) {
  for (const BadCase<C>& bad : cases) {
    SCOPED_TRACE(bad.needle);
    C c = good(C{});
    ASSERT_NO_THROW(c.validate());
    bad.spoil(c);
    expect_error<kopt::InvalidArgument>([&] { c.validate(); }, bad.needle);
    expect_error<kopt::InvalidArgument>([&] { kopt::validate(kopt::AlgorithmConfig(c)); },
                                        bad.needle);
    expect_error<kopt::InvalidArgument>([&] { kopt::ParamGroup group(c); }, bad.needle);
    expect_error<kopt::InvalidArgument>([&] { kopt::ParamGroup(c, kopt::StatePlacement::host); },
                                        bad.needle);
    kopt::ParamGroup fine(good(C{}));
    expect_error<kopt::InvalidArgument>([&] { fine.set_algorithm(c); }, bad.needle);
    EXPECT_EQ(fine.config<C>(), good(C{})) << "a refused set_algorithm changed the config";
    using Engine = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, typename C::Policy>;
    expect_error<kopt::InvalidArgument>([&] { Engine e(Kokkos::DefaultHostExecutionSpace(), c); },
                                        bad.needle);
    Engine engine(Kokkos::DefaultHostExecutionSpace(), good(C{}));
    expect_error<kopt::InvalidArgument>([&] { engine.add_group(c); }, bad.needle);
    EXPECT_EQ(engine.num_groups(), 1u);
  }
}

TEST(AlgorithmsBadConfig, EveryInvalidFieldIsNamedByValidateParamGroupAndEngine) {
  expect_refused_everywhere(bad_sgd());
  expect_refused_everywhere(bad_lion());
  expect_refused_everywhere(bad_adagrad());
  expect_refused_everywhere(bad_lamb());
  expect_refused_everywhere(bad_muon());
  expect_refused_everywhere(bad_adafactor());
}

// Muon updates whole matrices: a param without a 2-D shape (or a shard's piece) is refused
// by the engine and by the optimizer, naming it; so is an offloaded Muon group (not yet
// run), each before anything exists.
TEST(AlgorithmsBadConfig, MuonParamsWithoutShapeOrOffloadedAreRefusedNamingThem) {
  std::vector<float> w(12, 0.5f), g(12, 0.1f), bias(2, 0.5f);
  const auto weight = kopt::Tensor::from(w.data(), 12);
  const auto grad = kopt::Tensor::from(g.data(), 12);
  using Engine = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::MuonPolicy>;
  Engine engine(Kokkos::DefaultHostExecutionSpace(), kopt::MuonConfig{});
  for (const char* needle : {"'layer.weight'", "f32[12] @ host", "2-D shape"})
    expect_error<kopt::InvalidArgument>([&] { engine.add("layer.weight", weight, grad); }, needle);
  expect_error<kopt::InvalidArgument>(
      [&] { engine.add("piece", weight.shard_of(24, 12).matrix(4, 6), grad); }, "whole");
  EXPECT_EQ(engine.size(), 0u);
  const auto groups = [&](kopt::StatePlacement placement, const kopt::Tensor& p) {
    kopt::ParamGroup adam(kopt::AdamConfig{});
    adam.add("bias", kopt::Tensor::from(bias.data(), 2), kopt::Tensor::from(g.data(), 2));
    kopt::ParamGroup muon(kopt::MuonConfig{}, placement);
    muon.add("layer.weight", p, grad);
    return std::vector<kopt::ParamGroup>{adam, muon};
  };
  const auto with_params = kopt::StatePlacement::with_params;
  for (const char* needle : {"group 1 runs 'muon'", "'layer.weight'", "2-D shape"})
    expect_error<kopt::InvalidArgument>(
        [&] { kopt::HybridOptimizer opt(groups(with_params, weight)); }, needle);
  for (const char* needle : {"group 1 runs 'muon'", "offloaded groups", "'layer.weight'"})
    expect_error<kopt::InvalidArgument>(
        [&] { kopt::HybridOptimizer opt(groups(kopt::StatePlacement::host, weight.matrix(3, 4))); },
        needle);
  // Sharded, a Muon param is owned whole by one rank; a piece the training code shards
  // itself is not a whole matrix.
  kopt::HybridOptions sharded;
  sharded.sharding = kopt::ShardingOptions{std::make_shared<kopt::SingleProcessCommunicator>()};
  for (const char* needle :
       {"group 1 runs 'muon'", "'layer.weight'", "elements 12.. of 24", "give the whole tensor"})
    expect_error<kopt::InvalidArgument>(
        [&] {
          kopt::HybridOptimizer opt(groups(with_params, weight.shard_of(24, 12).matrix(4, 6)),
                                    sharded);
        },
        needle);
  EXPECT_NO_THROW(kopt::HybridOptimizer(groups(with_params, weight.matrix(3, 4)), sharded));
  kopt::HybridOptimizer fine(groups(with_params, weight.matrix(3, 4)));
  fine.step();
  EXPECT_NE(w[0], 0.5f) << "the Muon group did not step";
  // A rebind keeps the shape (or must give the same one).
  std::vector<float> w2(w);
  fine.rebind("layer.weight", kopt::Tensor::from(w2.data(), 12), grad);
  fine.step();
  for (const char* needle : {"'layer.weight'", "f32[4x3]", "f32[3x4]"})
    expect_error<kopt::ShapeMismatch>(
        [&] { fine.rebind("layer.weight", kopt::Tensor::from(w2.data(), 12).matrix(4, 3), grad); },
        needle);
}

// Adafactor takes params with a shape (factored) and without (a vector's variance), whole:
// a piece of a larger tensor and an offloaded group are refused naming the param, and
// nothing is added.
TEST(AlgorithmsBadConfig, AdafactorPiecesOrOffloadedAreRefusedNamingThem) {
  std::vector<float> w(12, 0.5f), g(12, 0.1f);
  const auto weight = kopt::Tensor::from(w.data(), 12);
  const auto grad = kopt::Tensor::from(g.data(), 12);
  using Engine =
      kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::AdafactorPolicy>;
  Engine engine(Kokkos::DefaultHostExecutionSpace(), kopt::AdafactorConfig{});
  for (const char* needle : {"'piece'", "whole param"})
    expect_error<kopt::InvalidArgument>([&] { engine.add("piece", weight.shard_of(24, 12), grad); },
                                        needle);
  EXPECT_EQ(engine.size(), 0u);
  const auto groups = [&](kopt::StatePlacement placement, const kopt::Tensor& p) {
    kopt::ParamGroup adafactor(kopt::AdafactorConfig{}, placement);
    adafactor.add("layer.weight", p, grad);
    return std::vector<kopt::ParamGroup>{adafactor};
  };
  for (const char* needle : {"group 0 runs 'adafactor'", "offloaded groups", "'layer.weight'"})
    expect_error<kopt::InvalidArgument>(
        [&] { kopt::HybridOptimizer opt(groups(kopt::StatePlacement::host, weight.matrix(3, 4))); },
        needle);
  kopt::HybridOptions sharded;
  sharded.sharding = kopt::ShardingOptions{std::make_shared<kopt::SingleProcessCommunicator>()};
  for (const char* needle : {"group 0 runs 'adafactor'", "'layer.weight'", "whole tensor"})
    expect_error<kopt::InvalidArgument>(
        [&] {
          kopt::HybridOptimizer opt(
              groups(kopt::StatePlacement::with_params, weight.shard_of(24, 12)), sharded);
        },
        needle);
  for (const kopt::Tensor& p : {weight, weight.matrix(3, 4)}) {
    std::fill(w.begin(), w.end(), 0.5f);
    kopt::HybridOptimizer fine(groups(kopt::StatePlacement::with_params, p), sharded);
    fine.step();
    EXPECT_NE(w[0], 0.5f) << "the Adafactor group did not step";
  }
}

// kopt::Tensor's 2-D shape: rows * cols must be its numel (a shard's: the global one); a
// slice or a shard_of drops it; describe() shows it; a row-major 2-D View carries it.
TEST(AlgorithmsBadConfig, TensorMatrixShapeIsCheckedAndDroppedWherePiecesAreTaken) {
  std::vector<float> w(12);
  const auto t = kopt::Tensor::from(w.data(), 12);
  EXPECT_FALSE(t.is_matrix());
  const auto m = t.matrix(3, 4);
  EXPECT_TRUE(m.is_matrix());
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(m.cols, 4);
  EXPECT_EQ(kopt::describe(m), "f32[3x4] @ host");
  for (const auto& shape : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {4, 4}, {-3, -4}, {0, 12}, {12, 0}, {5, 2}, {INT64_MAX, 2}})
    expect_error<kopt::InvalidArgument>([&] { (void)t.matrix(shape.first, shape.second); },
                                        "rows * cols must be 12");
  EXPECT_FALSE(m.slice(0, 4).is_matrix());
  EXPECT_FALSE(m.shard_of(24, 12).is_matrix());
  EXPECT_TRUE(t.shard_of(24, 12).matrix(4, 6).is_matrix());  // the global tensor's shape
  expect_error<kopt::InvalidArgument>([&] { (void)t.shard_of(24, 12).matrix(3, 4); }, "must be 24");
  EXPECT_EQ(kopt::Tensor::from(w.data(), 0).matrix(0, 5).rows, 0);
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 5, 7);
  const kopt::Tensor from_view(v);
  EXPECT_EQ(from_view.rows, 5);
  EXPECT_EQ(from_view.cols, 7);
  EXPECT_EQ(from_view.numel, 35);
}

// LAMB's update needs each whole param's norms: an offloaded group (its engine streams
// params in pieces) is refused when the optimizer is built, naming the group, the parameter
// and why, and so is a pre-sharded piece whose blocks would not be the whole tensor's.
TEST(AlgorithmsBadConfig, LambOffloadedOrMisalignedPieceIsRefusedNamingTheParam) {
  std::vector<float> w(8, 0.5f), g(8, 0.1f), bias(2, 0.5f);
  const auto groups = [&](kopt::StatePlacement placement) {
    kopt::ParamGroup adam(kopt::AdamConfig{});
    adam.add("bias", kopt::Tensor::from(bias.data(), 2), kopt::Tensor::from(g.data(), 2));
    kopt::ParamGroup lamb(kopt::LambConfig{}, placement);
    lamb.add("layer.weight", kopt::Tensor::from(w.data() + 2, 6), kopt::Tensor::from(g.data(), 6));
    return std::vector<kopt::ParamGroup>{adam, lamb};
  };
  for (const char* needle : {"group 1 runs 'lamb'", "offloaded groups", "'layer.weight'"})
    expect_error<kopt::InvalidArgument>(
        [&] { kopt::HybridOptimizer opt(groups(kopt::StatePlacement::host)); }, needle);
  // A piece of a tensor the training code shards itself must start at a multiple of 16
  // (the norm's blocks); ZeRO's own cuts always do.
  kopt::HybridOptions sharded;
  sharded.sharding = kopt::ShardingOptions{std::make_shared<kopt::SingleProcessCommunicator>()};
  const auto piece = [&](std::int64_t offset) {
    kopt::ParamGroup lamb(kopt::LambConfig{});
    lamb.add("layer.weight", kopt::Tensor::from(w.data(), 6).shard_of(64, offset),
             kopt::Tensor::from(g.data(), 6).shard_of(64, offset));
    return std::vector<kopt::ParamGroup>{lamb};
  };
  for (const char* needle : {"'layer.weight'", "offset 8", "multiples of 16"})
    expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt(piece(8), sharded); },
                                        needle);
  // At 16 the piece passes that check, and is refused as a part alone in a world of one.
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt(piece(16), sharded); },
                                      "elements [0, 16) are held by no rank");
  kopt::HybridOptimizer fine(groups(kopt::StatePlacement::with_params), sharded);
  fine.step();
  EXPECT_NE(w[2], 0.5f) << "the LAMB group did not step";
}

// A schedule spoils group 1's config between steps (group 0 is Adam, group 2 offloaded, of
// the same algorithm as group 1): step() throws naming the group and the field and changes
// nothing; once the config is fixed, the run goes on as a twin that never saw it.
template <class C>
void expect_schedule_refused(const std::vector<BadCase<C>>& cases) {
  const std::vector<kopt::AlgorithmConfig> configs = {kopt::AdamConfig{}, good(C{}), good(C{})};
  const std::vector<ParamDef> defs = {ParamDef{0, DType::f32, DType::f32, false, 13},
                                      ParamDef{1, DType::f32, DType::f32, false, 31},
                                      ParamDef{1, DType::bf16, DType::f16, false, 7},
                                      ParamDef{2, DType::f16, DType::f32, false, 9}};
  const kopt::HybridOptions options{.max_grad_norm = 1.0};
  for (const BadCase<C>& bad : cases) {
    SCOPED_TRACE(bad.needle);
    AlgorithmWorld w(configs, defs, options, 5, {false, false, true});
    AlgorithmWorld twin(configs, defs, options, 5, {false, false, true});
    w.train(0, 2);
    twin.train(0, 2);
    const auto before = w.all_params();
    const auto state_before = saved_params(*w.opt);
    bad.spoil(w.opt->group(1).config<C>());
    w.set_grads(2);
    expect_error<kopt::InvalidArgument>([&] { w.opt->step(); }, "group 1: " + bad.needle);
    EXPECT_EQ(w.all_params(), before) << "a refused step moved params";
    for (std::size_t j = 0; j < defs.size(); ++j) EXPECT_EQ(w.opt->step_count(w.name(j)), 2);
    w.opt->group(1).config<C>() = good(C{});
    EXPECT_TRUE(saved_params(*w.opt) == state_before) << "a refused step changed the state";
    w.train(2, 2);
    twin.train(2, 2);
    EXPECT_EQ(w.all_params(), twin.all_params());
  }
}

TEST(AlgorithmsBadConfig, SgdScheduleChangeToAnInvalidValueIsRefusedByStep) {
  expect_schedule_refused(bad_sgd());
}
TEST(AlgorithmsBadConfig, LionScheduleChangeToAnInvalidValueIsRefusedByStep) {
  expect_schedule_refused(bad_lion());
}
TEST(AlgorithmsBadConfig, AdagradScheduleChangeToAnInvalidValueIsRefusedByStep) {
  expect_schedule_refused(bad_adagrad());
}

// The config of a group is asked for as its own algorithm's; config() is Adam's.
TEST(AlgorithmsBadConfig, AConfigOfAnotherAlgorithmIsRefusedNamingBoth) {
  AlgorithmWorld w({kopt::AdamConfig{}, kopt::SgdConfig{.momentum = 0.9}, kopt::LionConfig{},
                    kopt::AdagradConfig{}},
                   {ParamDef{1, DType::f32, DType::f32, false, 5}});
  for (const char* needle : {"runs 'sgd'", "not 'adam'"})
    expect_error<kopt::InvalidArgument>([&] { w.opt->group(1).config(); }, needle);
  const kopt::HybridOptimizer::Group sgd = w.opt->group(1);  // the const overload too
  expect_error<kopt::InvalidArgument>([&] { sgd.config(); }, "not 'adam'");
  expect_error<kopt::InvalidArgument>([&] { w.opt->group(1).config<kopt::LionConfig>(); },
                                      "not 'lion'");
  expect_error<kopt::InvalidArgument>([&] { w.opt->group(2).config<kopt::AdagradConfig>(); },
                                      "runs 'lion'");
  expect_error<kopt::InvalidArgument>([&] { w.opt->group(3).config<kopt::SgdConfig>(); },
                                      "runs 'adagrad'");
  EXPECT_EQ(w.opt->group(1).config<kopt::SgdConfig>().momentum, 0.9);
  EXPECT_EQ(w.opt->group(0).config().lr, kopt::AdamConfig{}.lr);
  EXPECT_STREQ(kopt::algorithm_name(w.opt->group(3).algorithm()), "adagrad");
}

}  // namespace test_algorithms_bad_config
}  // namespace
