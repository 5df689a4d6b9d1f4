// SGD, Lion and Adagrad through the HybridOptimizer: offloaded groups give bitwise what
// local ones give, checkpoints resume bitwise and refuse another algorithm's state.
#include <variant>

#include "algorithm_world.hpp"
#include "test_support.hpp"

namespace {
namespace test_algorithms_hybrid {

using namespace kopt_test;
using kopt::DType;

// Two groups of each algorithm, between them every switch that changes the state kept.
std::vector<std::vector<kopt::AlgorithmConfig>> algorithms() {
  return {
      {kopt::SgdConfig{.lr = 0.05, .momentum = 0.9, .nesterov = true},
       kopt::SgdConfig{.lr = 0.1, .momentum = 0.5, .dampening = 0.2, .weight_decay = 0.01}},
      {kopt::SgdConfig{.lr = 0.1}, kopt::SgdConfig{.lr = 0.05, .weight_decay = 0.1}},  // no state
      {kopt::LionConfig{.lr = 1e-3, .weight_decay = 0.1},
       kopt::LionConfig{.lr = 3e-4, .beta1 = 0.95, .beta2 = 0.98, .maximize = true}},
      {kopt::AdagradConfig{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1},
       kopt::AdagradConfig{.weight_decay = 0.05, .eps = 1e-6, .maximize = true}},
  };
}

std::string describe(const std::vector<kopt::AlgorithmConfig>& configs) {
  std::string s = kopt::algorithm_name(configs[0]);
  if (const auto* sgd = std::get_if<kopt::SgdConfig>(&configs[0])) {
    s += sgd->momentum == 0 ? " without momentum" : " with momentum";
  }
  return s;
}

// f32, bf16 and f16 params (sizes 1, 13, 1000, 8199) in both groups.
std::vector<ParamDef> defs() { return mixed_defs(2); }

void expect_same_params(AlgorithmWorld& a, AlgorithmWorld& b) {
  for (std::size_t j = 0; j < a.defs.size(); ++j) {
    EXPECT_EQ(a.params[j].get(), b.params[j].get()) << a.name(j);
    EXPECT_EQ(a.opt->step_count(a.name(j)), b.opt->step_count(b.name(j))) << a.name(j);
  }
}

void expect_same_state(AlgorithmWorld& a, AlgorithmWorld& b) {
  const auto sa = saved_params(*a.opt), sb = saved_params(*b.opt);
  ASSERT_EQ(sa.size(), a.defs.size());
  for (const auto& [name, s] : sa) {
    ASSERT_TRUE(sb.count(name)) << name;
    EXPECT_TRUE(s == sb.at(name)) << name << ": state differs";
  }
}

// A schedule: group g's lr times f, whatever its algorithm.
void scale_lr(kopt::HybridOptimizer::Group g, double f) {
  std::visit([&](const auto& c) { g.config<std::decay_t<decltype(c)>>().lr *= f; }, g.algorithm());
}

kopt::HybridOptions clipped() {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;  // the norm (~ 80) is clipped: the scale reaches the kernels
  return options;
}

TEST(AlgorithmsHybrid, OffloadedGroupsMatchLocalGroupsBitwise) {
  kopt::HybridOptions options = clipped();
  options.offload.chunk_elements = 777;  // params cut into chunks, chunks across params
  for (const auto& configs : algorithms()) {
    SCOPED_TRACE(describe(configs));
    AlgorithmWorld local(configs, defs(), options, 3);
    AlgorithmWorld off(configs, defs(), options, 3, {true, true});
    for (std::size_t j = 0; j < local.defs.size(); ++j) {
      ASSERT_FALSE(local.opt->is_offloaded(local.name(j)));
      ASSERT_TRUE(off.opt->is_offloaded(off.name(j)));
    }
    for (int s = 0; s < 20; ++s) {
      if (s == 12)
        for (AlgorithmWorld* w : {&local, &off}) scale_lr(w->opt->group(1), 0.5);
      local.set_grads(s);
      off.set_grads(s);
      const kopt::StepStats a = local.opt->step(), b = off.opt->step();
      EXPECT_EQ(a.grad_norm, b.grad_norm);
      EXPECT_LT(a.clip_factor, 1.0);
    }
    expect_same_params(local, off);
    expect_same_state(local, off);
    // The state kept is not all zeros (two engines that never wrote it would compare equal),
    // and none is kept where the algorithm keeps none (SGD without momentum, f32 params).
    for (const auto& [name, s] : saved_params(*local.opt)) {
      for (const auto& array : s.values)
        EXPECT_NE(array, std::vector<std::uint32_t>(array.size(), 0u)) << name;
      EXPECT_EQ(s.step, 20);
      EXPECT_EQ(s.arrays, kopt::Impl::arrays_of(configs[0])) << name;
    }
  }
}

// Train 10 steps (an lr schedule on the way), save, train 10 more; a fresh optimizer with
// the other placement, given the weights at the save, loads and trains the same 10 steps:
// bitwise the same params and state.
TEST(AlgorithmsHybrid, SaveAndLoadResumeBitwise) {
  for (const auto& configs : algorithms()) {
    SCOPED_TRACE(describe(configs));
    TempDir dir;
    AlgorithmWorld a(configs, defs(), clipped(), 4, {false, true});
    a.train(0, 5);
    scale_lr(a.opt->group(0), 0.5);  // the file carries it; b's constructor does not
    a.train(5, 5);
    a.opt->save(dir.str("ckpt"));
    const auto weights = a.all_params();
    a.train(10, 10);
    AlgorithmWorld b(configs, defs(), clipped(), 4, {true, false});
    for (std::size_t j = 0; j < b.defs.size(); ++j) b.params[j].set(weights[j]);
    b.opt->load(dir.str("ckpt"));
    for (std::size_t j = 0; j < b.defs.size(); ++j)
      EXPECT_EQ(b.opt->step_count(b.name(j)), 10) << b.name(j);
    b.train(10, 10);
    expect_same_params(a, b);
    expect_same_state(a, b);
  }
}

// LAMB (local groups: offloaded ones are refused): a checkpoint resumes bitwise, the
// trust ratio included (each step computes it again from the params and the loaded moments).
TEST(AlgorithmsHybrid, LambSaveAndLoadResumeBitwise) {
  const std::vector<kopt::AlgorithmConfig> configs = {
      kopt::LambConfig{.lr = 1e-2},
      kopt::LambConfig{.lr = 5e-3, .weight_decay = 0.1, .clamp_trust = true}};
  TempDir dir;
  AlgorithmWorld a(configs, defs(), clipped(), 4);
  a.train(0, 5);
  scale_lr(a.opt->group(0), 0.5);
  a.train(5, 5);
  a.opt->save(dir.str("ckpt"));
  const auto weights = a.all_params();
  a.train(10, 10);
  AlgorithmWorld b(configs, defs(), clipped(), 4);
  for (std::size_t j = 0; j < b.defs.size(); ++j) b.params[j].set(weights[j]);
  b.opt->load(dir.str("ckpt"));
  b.train(10, 10);
  expect_same_params(a, b);
  expect_same_state(a, b);
  for (const auto& [name, s] : saved_params(*a.opt)) {
    EXPECT_EQ(s.step, 20) << name;
    EXPECT_EQ(s.arrays, 3u) << name;
  }
}

// Muon on matrices beside AdamW in one optimizer, clipping on: a checkpoint resumes bitwise,
// whether the weights are written before the load or after it (then reload_model_params),
// the momentum buffers and the masters of 16-bit params included.
TEST(AlgorithmsHybrid, MuonBesideAdamWSaveAndLoadResumeBitwise) {
  const std::vector<kopt::AlgorithmConfig> configs = {kopt::MuonConfig{.lr = 2e-2},
                                                      kopt::AdamConfig{.lr = 1e-3}};
  TempDir dir;
  AlgorithmWorld a(configs, defs(), clipped(), 5);
  a.train(0, 5);
  scale_lr(a.opt->group(0), 0.5);
  a.train(5, 5);
  a.opt->save(dir.str("ckpt"));
  const auto weights = a.all_params();
  a.train(10, 10);
  for (const bool weights_first : {true, false}) {
    SCOPED_TRACE(weights_first ? "weights, then load" : "load, then weights");
    AlgorithmWorld b(configs, defs(), clipped(), 5);
    b.train(0, 1);  // a state of its own first: the load replaces it
    if (weights_first)
      for (std::size_t j = 0; j < b.defs.size(); ++j) b.params[j].set(weights[j]);
    b.opt->load(dir.str("ckpt"));
    if (!weights_first) {
      for (std::size_t j = 0; j < b.defs.size(); ++j) b.params[j].set(weights[j]);
      b.opt->reload_model_params();
    }
    b.train(10, 10);
    expect_same_params(a, b);
    expect_same_state(a, b);
  }
  for (const auto& [name, s] : saved_params(*a.opt)) EXPECT_EQ(s.step, 20) << name;
}

// Adafactor beside AdamW, clipping on, its params matrices and vectors of every dtype: a
// checkpoint (its factored statistics per param, not per element) resumes bitwise, weights
// written before the load or after it, and twice in a row.
TEST(AlgorithmsHybrid, AdafactorBesideAdamWSaveAndLoadResumeBitwise) {
  const std::vector<kopt::AlgorithmConfig> configs = {
      kopt::AdafactorConfig{.lr = 2e-2, .weight_decay = 0.01}, kopt::AdamConfig{.lr = 1e-3}};
  TempDir dir;
  AlgorithmWorld a(configs, defs(), clipped(), 8);
  a.train(0, 5);
  scale_lr(a.opt->group(0), 0.5);
  a.train(5, 5);
  a.opt->save(dir.str("ckpt"));
  const auto weights = a.all_params();
  a.train(10, 10);
  for (const bool weights_first : {true, false}) {
    SCOPED_TRACE(weights_first ? "weights, then load" : "load, then weights");
    AlgorithmWorld b(configs, defs(), clipped(), 8);
    b.train(0, 1);  // a state of its own first: the load replaces it
    for (int twice = 0; twice < 2; ++twice) b.load(dir.str("ckpt"), weights, weights_first);
    b.train(10, 10);
    expect_same_params(a, b);
    expect_same_state(a, b);
  }
  std::size_t factored = 0;
  for (const auto& [name, s] : saved_params(*a.opt)) {
    EXPECT_EQ(s.step, 20) << name;
    const std::size_t j = std::stoul(name.substr(1));
    if (a.defs[j].group != 0 || a.defs[j].n == 0) continue;
    // Per param: rows + cols floats for a matrix, numel for a vector, none per element.
    const kopt::Tensor t = a.shaped(j, a.params[j].tensor());
    EXPECT_EQ(s.arrays, 0u) << name;
    EXPECT_EQ(s.tensor_state.size(), t.is_matrix() ? std::size_t(t.rows + t.cols) : a.defs[j].n)
        << name;
    EXPECT_NE(s.tensor_state, std::vector<std::uint32_t>(s.tensor_state.size(), 0u)) << name;
    factored += t.is_matrix() && t.rows > 1 && t.cols > 1;
  }
  EXPECT_GT(factored, 0u);
}

// Adafactor's per-param state fits its param's shape only: a checkpoint of a matrix does not
// load into the param transposed, or without its shape; refused naming both shapes, nothing
// changed.
TEST(AlgorithmsHybrid, AdafactorStateOfAnotherShapeIsRefused) {
  std::vector<float> w(20 * 50, 0.5f), g(20 * 50, 0.25f);
  const auto run = [&](const kopt::Tensor& param) {
    kopt::ParamGroup group(kopt::AdafactorConfig{});
    group.add("w", param, kopt::Tensor::from(g.data(), g.size()));
    return kopt::HybridOptimizer({group});
  };
  const kopt::Tensor flat = kopt::Tensor::from(w.data(), w.size());
  TempDir dir;
  kopt::HybridOptimizer a = run(flat.matrix(20, 50));
  a.step();
  a.save(dir.str("ckpt"));
  const std::pair<kopt::Tensor, const char*> others[] = {
      {flat.matrix(50, 20), "saved as 20 x 50 with 70 floats of per-param state; it is 50 x 20"},
      {flat, "saved as 20 x 50 with 70 floats of per-param state; it is a vector (no shape)"}};
  for (const auto& [other, message] : others) {
    kopt::HybridOptimizer b = run(other);
    b.step();
    const auto before = saved_params(b);
    expect_error<kopt::CheckpointError>([&] { b.load(dir.str("ckpt")); }, message);
    EXPECT_TRUE(saved_params(b) == before);
  }
  // And a vector's state into the matrix: named as a vector.
  kopt::HybridOptimizer v = run(flat);
  v.step();
  v.save(dir.str("vector"));
  kopt::HybridOptimizer m = run(flat.matrix(20, 50));
  m.step();
  expect_error<kopt::CheckpointError>([&] { m.load(dir.str("vector")); },
                                      "saved as a vector (no shape) with 1000 floats");
}

// A checkpoint of one algorithm's group loaded into a group of another: refused naming
// both, and the optimizer is as before (params, state, step counts, config).
TEST(AlgorithmsHybrid, AnotherAlgorithmsCheckpointIsRefusedNamingBoth) {
  const std::vector<kopt::AlgorithmConfig> all = {
      kopt::AdamConfig{},     kopt::SgdConfig{.lr = 0.1, .momentum = 0.9},
      kopt::LionConfig{},     kopt::AdagradConfig{},
      kopt::LambConfig{},     kopt::MuonConfig{},
      kopt::AdafactorConfig{}};
  const std::vector<ParamDef> two = {ParamDef{0, DType::f32, DType::f32, false, 13},
                                     ParamDef{0, DType::bf16, DType::f32, false, 29}};
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t k = 0; k < all.size(); ++k) {
      if (k == i) continue;
      const std::string saved = kopt::algorithm_name(all[i]),
                        loading = kopt::algorithm_name(all[k]);
      SCOPED_TRACE(saved + " loaded into " + loading);
      TempDir dir;
      AlgorithmWorld a({all[i]}, two, {}, 6);
      a.train(0, 2);
      a.opt->save(dir.str("ckpt"));
      AlgorithmWorld b({all[k]}, two, {}, 6);
      b.train(0, 1);
      const auto params = b.all_params();
      const auto state = saved_params(*b.opt);
      for (const std::string& needle : {"saved by " + saved, "runs " + loading})
        expect_error<kopt::CheckpointError>([&] { b.opt->load(dir.str("ckpt")); }, needle);
      EXPECT_EQ(b.all_params(), params);
      EXPECT_TRUE(saved_params(*b.opt) == state);
      EXPECT_EQ(b.opt->group(0).algorithm(), all[k]);
    }
  }
}

// Switches the array a config can turn off (SGD's momentum buffer, Adam's amsgrad max) on or off.
void switch_array(kopt::HybridOptimizer::Group g, bool on) {
  if (std::holds_alternative<kopt::SgdConfig>(g.algorithm()))
    g.config<kopt::SgdConfig>().momentum = on ? 0.9 : 0.0;
  else
    g.config().amsgrad = on;
}

// Grads 100 times smaller after the first 3 steps: an amsgrad max of those steps stays the
// max, and is what a run that lost it (or kept a stale one) gets wrong.
void train_decaying(AlgorithmWorld& w, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    w.set_grads(s, s < 3 ? 1.0 : 0.01);
    w.opt->step();
  }
}

std::vector<kopt::AlgorithmConfig> switchable() {
  return {kopt::SgdConfig{.lr = 0.05, .momentum = 0.9},
          kopt::AdamConfig{.lr = 1e-2, .amsgrad = true}};
}

std::vector<ParamDef> one_group() {
  std::vector<ParamDef> d = defs();
  for (ParamDef& p : d) p.group = 0;
  return d;
}

// b takes a's weights at the save and loads the checkpoint at `path`; both switch the array
// on and train 3 more steps: the same params and state, bitwise.
void resume_with_the_array_on(AlgorithmWorld& a, AlgorithmWorld& b,
                              const std::vector<std::vector<double>>& weights,
                              const std::string& path) {
  for (std::size_t j = 0; j < b.defs.size(); ++j) b.params[j].set(weights[j]);
  b.opt->load(path);
  for (AlgorithmWorld* w : {&a, &b}) {
    switch_array(w->opt->group(0), true);
    train_decaying(*w, 4, 3);
  }
  expect_same_params(a, b);
  expect_same_state(a, b);
}

// A schedule that switches a state array off and on again: the optimizer keeps the array
// meanwhile and uses it again, as torch does, so a checkpoint saved while it is off carries
// it (local and offloaded, either way round) for a bitwise resume.
TEST(AlgorithmsHybrid, SaveWhileAStateArrayIsSwitchedOffResumesBitwise) {
  for (const kopt::AlgorithmConfig& config : switchable()) {
    for (const bool offloaded : {false, true}) {
      SCOPED_TRACE(std::string(kopt::algorithm_name(config)) + (offloaded ? ", offloaded" : ""));
      TempDir dir;
      AlgorithmWorld a({config}, one_group(), {}, 9, {offloaded});
      train_decaying(a, 0, 3);
      switch_array(a.opt->group(0), false);
      train_decaying(a, 3, 1);
      a.opt->save(dir.str("ckpt"));
      for (const auto& [name, s] : saved_params(*a.opt))  // the array switched off is in it
        EXPECT_EQ(s.arrays, kopt::Impl::arrays_of(config)) << name;
      const auto weights = a.all_params();
      AlgorithmWorld b({config}, one_group(), {}, 9, {!offloaded});
      resume_with_the_array_on(a, b, weights, dir.str("ckpt"));
    }
  }
}

// A checkpoint whose group never used an array, loaded into an optimizer that has used it:
// the array loads as the zeros it starts from, not as the values the optimizer held.
TEST(AlgorithmsHybrid, AnArrayTheFileDoesNotHoldLoadsAsZeros) {
  for (const kopt::AlgorithmConfig& config : switchable()) {
    for (const bool offloaded : {false, true}) {
      SCOPED_TRACE(std::string(kopt::algorithm_name(config)) + (offloaded ? ", offloaded" : ""));
      TempDir dir;
      AlgorithmWorld a({config}, one_group(), {}, 9, {offloaded});
      switch_array(a.opt->group(0), false);
      train_decaying(a, 0, 4);
      a.opt->save(dir.str("ckpt"));
      const auto weights = a.all_params();
      AlgorithmWorld b({config}, one_group(), {}, 9, {offloaded});
      train_decaying(b, 0, 3);  // the array holds something
      resume_with_the_array_on(a, b, weights, dir.str("ckpt"));
    }
  }
}

// SGD's buffer starts in a param's first step (b = g); a group whose momentum is raised from
// 0 only later starts from the zeros it holds, b = (1 - dampening) g, where torch starts at
// b = g (README, Algorithms): the same with dampening 0. One element, p = 1, g = 1, lr 1.
TEST(SgdMomentum, RaisedFromZeroLaterStartsFromZeroAsDocumented) {
  for (const bool offloaded : {false, true}) {
    for (const double dampening : {0.5, 0.0}) {
      SCOPED_TRACE(std::string(offloaded ? "offloaded" : "local") + ", dampening " +
                   std::to_string(dampening));
      std::vector<float> p{1.0f}, g{1.0f};
      kopt::ParamGroup group(
          kopt::SgdConfig{.lr = 1.0, .dampening = dampening},
          offloaded ? kopt::StatePlacement::host : kopt::StatePlacement::with_params);
      group.add("w", kopt::Tensor::from(p.data(), 1), kopt::Tensor::from(g.data(), 1));
      kopt::HybridOptimizer opt({group});
      opt.step();  // momentum 0: p = 1 - 1
      EXPECT_EQ(p[0], 0.0f);
      opt.group(0).config<kopt::SgdConfig>().momentum = 0.9;
      opt.step();  // b = 0.9 x 0 + (1 - dampening) x 1
      const float b = static_cast<float>(1.0 - dampening);
      EXPECT_EQ(p[0], -b);
      opt.step();  // b = 0.9 b + (1 - dampening)
      EXPECT_FLOAT_EQ(p[0], -b - (0.9f * b + b));
    }
  }
}

}  // namespace test_algorithms_hybrid
}  // namespace
