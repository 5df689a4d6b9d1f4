// The promises about weights, masters and checkpoints in any order a training code may make
// its calls: random sequences of steps (some params without grads), hyperparameter changes,
// weights written with reload_model_params(), saves, and loads (into the same optimizer or a
// new one placed otherwise, the weights restored before or after, some of them changed)
// against an oracle that never saves or loads. On a load the oracle is built again and
// replays what the training had done up to that save, then takes the same weights: from then
// on the two must agree bit for bit, params after every step and the whole state at the end.
// Groups cover fp32 masters, remainders, no master with stochastic rounding, 16-bit and q8
// state, and Adam, Lion and LAMB; the subject's groups are offloaded or local at random (all
// but LAMB's, which offload does not run).
#include <gtest/gtest.h>

#include <random>

#include "algorithm_world.hpp"

namespace {
namespace test_call_orders {

using namespace kopt_test;
using kopt::DType;

// What the oracle replays: a step (params without a grad in `skip`), weights written into
// every param followed by reload_model_params(), or a group's new learning rate.
struct Op {
  enum Kind { step, weights, lr };
  Kind kind = step;
  int s = 0;
  std::vector<bool> skip{};
  std::vector<std::vector<double>> w{};
  std::size_t group = 0;
  double value = 0;
};

struct Saved {
  std::vector<Op> history;  // what the training had done when it was saved (a load since
                            // may have gone back to an earlier save: another timeline)
  std::vector<std::vector<double>> weights;
};

std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01}, kopt::AdamConfig{.lr = 2e-2},
          kopt::AdamConfig{.lr = 1e-2}, kopt::LionConfig{.lr = 1e-3}, kopt::LambConfig{.lr = 1e-2}};
}

std::vector<kopt::StateStorage> storage() {
  kopt::StateStorage remainder{.master = kopt::MasterStorage::remainder, .arrays = DType::bf16};
  kopt::StateStorage none{.master = kopt::MasterStorage::none,
                          .arrays = DType::q8,
                          .rounding = kopt::Rounding::stochastic,
                          .seed = 99};
  return {{}, remainder, none, {}, {}};
}

// Every group's param dtypes and sizes (1, odd, more than a q8 block).
std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, false, 300}, {0, DType::f32, DType::f32, false, 37},
          {0, DType::f16, DType::bf16, false, 1},    {1, DType::bf16, DType::f32, false, 513},
          {1, DType::bf16, DType::bf16, false, 7},   {2, DType::bf16, DType::bf16, false, 300},
          {3, DType::f16, DType::f16, false, 64},    {4, DType::bf16, DType::f32, false, 100}};
}

struct World {
  std::unique_ptr<AlgorithmWorld> w;
  std::vector<bool> skipped;
  World(std::vector<bool> host_state, const kopt::HybridOptions& options) {
    w = std::make_unique<AlgorithmWorld>(configs(), defs(), options, 5, host_state, storage());
    skipped.assign(w->defs.size(), false);
  }
  void apply(const Op& op) {
    if (op.kind == Op::step) {
      for (std::size_t j = 0; j < skipped.size(); ++j)
        if (op.skip[j] != skipped[j]) {
          w->opt->set_grad(AlgorithmWorld::name(j),
                           op.skip[j] ? kopt::Tensor{} : w->grads[j].tensor());
          skipped[j] = op.skip[j];
        }
      w->set_grads(op.s);
      w->opt->step();
    } else if (op.kind == Op::weights) {
      set_weights(op.w);
      w->opt->reload_model_params();
    } else {
      auto group = w->opt->group(op.group);
      if (std::holds_alternative<kopt::LionConfig>(group.algorithm()))
        group.config<kopt::LionConfig>().lr = op.value;
      else if (std::holds_alternative<kopt::LambConfig>(group.algorithm()))
        group.config<kopt::LambConfig>().lr = op.value;
      else
        group.config<kopt::AdamConfig>().lr = op.value;
    }
  }
  void set_weights(const std::vector<std::vector<double>>& weights) {
    for (std::size_t j = 0; j < weights.size(); ++j) w->params[j].set(weights[j]);
  }
};

// Params bit for bit (as the doubles their dtype widens to: exact).
void expect_same_params(World& subject, World& oracle, const std::string& when) {
  const auto a = subject.w->all_params(), b = oracle.w->all_params();
  for (std::size_t j = 0; j < a.size(); ++j) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a[j].size(); ++i)
      differ += bits_of(static_cast<float>(a[j][i])) != bits_of(static_cast<float>(b[j][i]));
    EXPECT_EQ(differ, 0u) << "param p" << j << " after " << when;
  }
}

class CallOrders : public ::testing::TestWithParam<unsigned> {};

TEST_P(CallOrders, AgreeWithAnOracleThatNeverSavesOrLoads) {
  const unsigned seed = GetParam();
  std::mt19937 rng(seed);
  const auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  kopt::HybridOptions options;
  if (seed % 2 == 1) options.max_grad_norm = 1.0;  // clipping: every param's grads count
  const auto placement = [&] {
    std::vector<bool> host(configs().size());  // LAMB's group (the last) is never offloaded
    for (std::size_t g = 0; g + 1 < host.size(); ++g) host[g] = coin(0.5);
    return host;
  };
  TempDir dir;
  auto subject = std::make_unique<World>(placement(), options);
  auto oracle = std::make_unique<World>(std::vector<bool>{}, options);
  std::vector<Op> history;
  std::vector<Saved> saves;
  std::string log;  // the calls so far, for a failure's message
  int next_step = 0;
  const std::size_t n = subject->w->defs.size();
  for (int k = 0; k < 40; ++k) {
    const double pick = std::uniform_real_distribution<double>(0, 1)(rng);
    if (pick < 0.45) {
      Op op{.kind = Op::step, .s = next_step++};
      for (std::size_t j = 0; j < n; ++j) op.skip.push_back(coin(0.15));
      subject->apply(op);
      oracle->apply(op);
      history.push_back(op);
      log += " step";
      expect_same_params(*subject, *oracle, log);
    } else if (pick < 0.55) {  // new weights in some elements of some params (model surgery)
      Op op{.kind = Op::weights};
      op.w = subject->w->all_params();
      for (auto& p : op.w)
        for (auto& x : p)
          if (coin(0.2)) x = std::uniform_real_distribution<double>(-1, 1)(rng);
      subject->apply(op);
      oracle->apply(op);
      history.push_back(op);
      log += " weights+reload";
    } else if (pick < 0.65) {
      Op op{.kind = Op::lr};
      op.group = rng() % configs().size();
      op.value = std::uniform_real_distribution<double>(1e-4, 3e-2)(rng);
      subject->apply(op);
      oracle->apply(op);
      history.push_back(op);
      log += " lr";
    } else if (pick < 0.8 || saves.empty()) {
      subject->w->opt->save(dir.str(std::to_string(saves.size())));
      saves.push_back({history, subject->w->all_params()});
      log += " save" + std::to_string(saves.size() - 1);
    } else {
      const std::size_t i = rng() % saves.size();
      // The weights saved beside it, some elements changed (weights from elsewhere).
      std::vector<std::vector<double>> weights = saves[i].weights;
      const bool changed = coin(0.3);
      if (changed)
        for (auto& p : weights)
          for (auto& x : p)
            if (coin(0.1)) x = std::uniform_real_distribution<double>(-1, 1)(rng);
      const bool fresh = coin(0.5), weights_first = coin(0.5), reload = coin(0.3);
      if (fresh) subject = std::make_unique<World>(placement(), options);
      if (weights_first) subject->set_weights(weights);
      subject->w->opt->load(dir.str(std::to_string(i)));
      if (!weights_first) subject->set_weights(weights);
      if (reload) subject->w->opt->reload_model_params();
      log += std::string(" load") + std::to_string(i) + (fresh ? "(new optimizer" : "(same") +
             (weights_first ? ", weights first" : ", weights after") +
             (changed ? ", some changed" : "") + (reload ? ", reload)" : ")");
      // The oracle: the training up to that save, then the same weights.
      history = saves[i].history;
      oracle = std::make_unique<World>(std::vector<bool>{}, options);
      for (const Op& op : history) oracle->apply(op);
      Op op{.kind = Op::weights};
      op.w = weights;
      oracle->apply(op);
      history.push_back(op);
      expect_same_params(*subject, *oracle, log);
    }
    if (HasFailure()) break;
  }
  EXPECT_TRUE(saved_params(*subject->w->opt) == saved_params(*oracle->w->opt))
      << "state differs after" << log;
}

INSTANTIATE_TEST_SUITE_P(Seeds, CallOrders, ::testing::Range(1u, 13u));

}  // namespace test_call_orders
}  // namespace
