// Masters never go stale: until a param's first update after construction, load() or
// reload_model_params(), its fp32 master follows the param (kept where it already rounds to
// it). So model weights may be written before or after save()/load(), and offloaded params
// (host masters, f32 ones included) behave exactly as local ones. Every test runs on a local
// and an offloaded group, for f32, bf16 and f16 params.
#include <cstring>
#include <functional>
#include <tuple>

#include "state_snapshot.hpp"

namespace {
namespace test_master_sync {

using namespace kopt_test;
using kopt::DType;
using Weights = std::vector<std::vector<double>>;

class MasterSync : public ::testing::TestWithParam<std::tuple<bool, DType>> {
 protected:
  bool offloaded() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  // Two params (the offload pipeline cuts them into several chunks); no clipping, so each
  // element's update depends on that element alone.
  std::unique_ptr<CheckpointModel> make() const {
    kopt::HybridOptions options;
    options.offload.chunk_elements = 256;
    return std::make_unique<CheckpointModel>(
        std::vector<ParamDef>{{0, dtype(), DType::f32, true, 1000},
                              {0, dtype(), DType::f32, true, 37}},
        std::vector<kopt::AdamConfig>{kopt::AdamConfig{.lr = 1e-2}}, std::vector<std::size_t>{0, 0},
        std::vector<std::size_t>{0, 1}, options, std::vector<bool>{offloaded()});
  }
};

Weights weights(CheckpointModel& m) {
  Weights w;
  for (Buffer& p : m.params) w.push_back(p.get());
  return w;
}
void set_weights(CheckpointModel& m, const Weights& w) {
  for (std::size_t j = 0; j < w.size(); ++j) m.params[j].set(w[j]);
}
// Other values than the model's own init (a new process, or a pretrained model), as stored.
Weights other_weights(CheckpointModel& m, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-2, 2);
  Weights w = weights(m);
  for (auto& v : w)
    for (double& x : v) x = dist(rng);
  set_weights(m, w);
  return weights(m);
}
// One step of the grads of step `step` with lr = 0: params and masters keep their values.
void still_step(CheckpointModel& m, int step) {
  const double lr = m.opt->group(0).config().lr;
  m.opt->group(0).config().lr = 0;
  m.set_grads(step);
  m.opt->step();
  m.opt->group(0).config().lr = lr;
}
// The fp32 masters in a snapshot's data file: per param exp_avg, exp_avg_sq, master.
std::vector<float> saved_master(const Snapshot& s, const CheckpointModel& m, std::size_t j) {
  std::size_t at = 0;
  for (std::size_t k = 0; k < j; ++k) at += 3 * m.defs[k].n * 4;
  std::vector<float> master(m.defs[j].n);
  std::memcpy(master.data(), s.state.data() + at + 2 * master.size() * 4, master.size() * 4);
  return master;
}

// a. Issue 1: save() before the first step must not pin the masters to the init.
TEST_P(MasterSync, SaveBeforeTheFirstStepThenNewWeights) {
  auto m = make(), twin = make();
  TempDir dir;
  m->opt->save(dir.str("ckpt"));
  const Weights w = other_weights(*m, 7);
  set_weights(*twin, w);
  still_step(*m, 0);
  EXPECT_EQ(weights(*m), w) << "lr = 0 must leave the new weights as they are";
  still_step(*twin, 0);
  m->train(1, 3);
  twin->train(1, 3);
  m->expect_same(*twin);
  EXPECT_TRUE(take_snapshot(*m) == take_snapshot(*twin));
}

enum class Order { weights_then_load, load_then_weights, load_save_then_weights };

// b, c. A full resume in a fresh optimizer (other init values) is bitwise the uninterrupted
// run, whatever the order of restoring the weights and load(), with or without a reload.
void expect_bitwise_resume(const std::function<std::unique_ptr<CheckpointModel>()>& make,
                           bool reload) {
  auto a = make();
  a->train(0, 3);
  TempDir dir;
  a->opt->save(dir.str("ckpt"));
  const Weights saved = weights(*a);
  a->train(3, 4);
  const Snapshot want = take_snapshot(*a);
  for (const Order order :
       {Order::weights_then_load, Order::load_then_weights, Order::load_save_then_weights}) {
    SCOPED_TRACE("order " + std::to_string(static_cast<int>(order)));
    auto b = make();
    other_weights(*b, 5);
    if (order == Order::weights_then_load) set_weights(*b, saved);
    b->opt->load(dir.str("ckpt"));
    if (order == Order::load_save_then_weights) b->opt->save(dir.str("other"));
    if (order != Order::weights_then_load) set_weights(*b, saved);
    if (reload) b->opt->reload_model_params();
    b->train(3, 4);
    a->expect_same(*b);
    EXPECT_TRUE(take_snapshot(*b) == want);
  }
}

TEST_P(MasterSync, FullResumeInEitherOrder) {
  expect_bitwise_resume([&] { return make(); }, false);
}

TEST_P(MasterSync, ReloadAfterLoadKeepsTheCheckpointMasters) {
  expect_bitwise_resume([&] { return make(); }, true);
}

// d. After load(), weights that differ from the checkpoint's in some elements: those take
// the new weights, every other element keeps the checkpoint's fp32 master.
TEST_P(MasterSync, ChangedElementsAfterLoadTakeTheNewWeights) {
  auto a = make(), b = make();
  a->train(0, 3);
  TempDir dir;
  a->opt->save(dir.str("ckpt"));
  Weights w = weights(*a);
  other_weights(*b, 5);
  b->opt->load(dir.str("ckpt"));
  const auto changed = [](std::size_t i) { return i % 5 == 2; };
  for (auto& v : w)
    for (std::size_t i = 0; i < v.size(); ++i)
      if (changed(i)) v[i] += 0.25;
  set_weights(*b, w);
  w = weights(*b);  // as stored
  still_step(*a, 3);
  still_step(*b, 3);
  EXPECT_EQ(weights(*b), w);
  if (dtype() != DType::f32) {
    const Snapshot sa = take_snapshot(*a), sb = take_snapshot(*b);
    for (std::size_t j = 0; j < w.size(); ++j) {
      const std::vector<float> ma = saved_master(sa, *a, j), mb = saved_master(sb, *b, j);
      for (std::size_t i = 0; i < w[j].size(); ++i)
        ASSERT_EQ(kopt::Impl::float_bits(mb[i]),
                  kopt::Impl::float_bits(changed(i) ? static_cast<float>(w[j][i]) : ma[i]))
            << "param " << j << " element " << i;
    }
  }
  a->train(4, 3);
  b->train(4, 3);
  const Weights wa = weights(*a), wb = weights(*b);
  for (std::size_t j = 0; j < w.size(); ++j)
    for (std::size_t i = 0; i < w[j].size(); ++i)
      if (!changed(i)) {
        ASSERT_EQ(wb[j][i], wa[j][i]) << "param " << j << " element " << i;
      }
}

// e. reload_model_params() before the first step, then new weights: the step takes them.
TEST_P(MasterSync, ReloadThenNewWeightsAtConstruction) {
  auto m = make(), twin = make();
  m->opt->reload_model_params();
  const Weights w = other_weights(*m, 9);
  set_weights(*twin, w);
  still_step(*m, 0);
  EXPECT_EQ(weights(*m), w);
  still_step(*twin, 0);
  m->train(1, 3);
  twin->train(1, 3);
  m->expect_same(*twin);
  EXPECT_TRUE(take_snapshot(*m) == take_snapshot(*twin));
}

INSTANTIATE_TEST_SUITE_P(PlacementsAndDtypes, MasterSync,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(DType::f32, DType::bf16, DType::f16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Offloaded_" : "Local_") +
                                  kopt::name_of(std::get<1>(info.param));
                         });

}  // namespace test_master_sync
}  // namespace
