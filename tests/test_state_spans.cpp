// FusedAdam's state in spans (read_state / write_state / commit_state, what checkpoints
// stream through): pieces read what the whole read gives, pieces written then committed are
// what a whole set_state gives, and a range outside the param is refused changing nothing.
#include <kopt/impl/engine.hpp>

#include "adam_case.hpp"

namespace {
namespace test_state_spans {

using namespace kopt_test;
using kopt::bfloat16;

template <class Space>
class StateSpanTest : public ::testing::Test {};
TYPED_TEST_SUITE(StateSpanTest, EnabledSpaces, SpaceName);

struct Arrays {
  std::vector<float> m, v, vmax, master;
  explicit Arrays(std::size_t n) : m(n), v(n), vmax(n), master(n) {}
  bool operator==(const Arrays&) const = default;
};

template <class Space>
Arrays read_in_pieces(kopt::FusedAdam<Space>& opt, const std::string& name, std::int64_t n,
                      std::int64_t piece) {
  Arrays a(static_cast<std::size_t>(n));
  for (std::int64_t at = 0; at < n; at += piece) {
    const std::int64_t c = std::min(piece, n - at);
    opt.read_state(name, at, c, a.m.data() + at, a.v.data() + at, a.vmax.data() + at,
                   a.master.data() + at);
  }
  return a;
}

TYPED_TEST(StateSpanTest, PiecesMatchTheWholeAndBadRangesChangeNothing) {
  const std::size_t n = 8192 + 5;
  AdamCase<TypeParam, bfloat16, float> c({kopt::AdamConfig{.amsgrad = true}}, {n});
  // Trained, then new weights written into a third of the param and not yet taken up: the
  // masters read are reconciled with them, span by span.
  const auto train_and_reweight = [](auto& k) {
    for (int s = 0; s < 3; ++s) k.step();
    k.params[0]->download();
    for (std::size_t i = 0; i < k.params[0]->host.size(); i += 3)
      k.params[0]->host[i] = bfloat16::from_float(0.25f);
    k.params[0]->upload();
    k.opt.reload_model_params();
  };
  train_and_reweight(c);
  const std::string name = c.name(0);
  const auto len = static_cast<std::int64_t>(n);
  const Arrays whole = read_in_pieces(c.opt, name, len, len);
  for (const std::int64_t piece : {1, 7, 1000})
    EXPECT_EQ(read_in_pieces(c.opt, name, len, piece), whole);

  Arrays scratch(n);
  float* const p[4] = {scratch.m.data(), scratch.v.data(), scratch.vmax.data(),
                       scratch.master.data()};
  for (const auto& [offset, count] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{-1, 1}, {len, 1}, {5, len}, {0, -1}}) {
    EXPECT_THROW(c.opt.read_state(name, offset, count, p[0], p[1], p[2], p[3]),
                 kopt::InvalidArgument);
    EXPECT_THROW(c.opt.write_state(name, offset, count, p[0], p[1], p[2], p[3]),
                 kopt::InvalidArgument);
  }
  EXPECT_THROW(c.opt.commit_state(name, -1), kopt::InvalidArgument);
  EXPECT_EQ(read_in_pieces(c.opt, name, len, len), whole);
  EXPECT_EQ(c.opt.step_count(name), 3);

  // Written back in two pieces (moments halved) and committed at step 40: what set_state of
  // the whole gives to an identical twin.
  Arrays next = whole;
  for (float& x : next.m) x *= 0.5f;
  const std::int64_t half = len / 2;
  c.opt.write_state(name, 0, half, next.m.data(), next.v.data(), next.vmax.data(),
                    next.master.data());
  c.opt.write_state(name, half, len - half, next.m.data() + half, next.v.data() + half,
                    next.vmax.data() + half, next.master.data() + half);
  c.opt.commit_state(name, 40);
  AdamCase<TypeParam, bfloat16, float> twin({kopt::AdamConfig{.amsgrad = true}}, {n});
  train_and_reweight(twin);
  twin.opt.set_state(name, 40, next.m.data(), next.v.data(), next.vmax.data(), next.master.data());
  EXPECT_EQ(c.opt.step_count(name), 40);
  EXPECT_EQ(read_in_pieces(c.opt, name, len, 1000), read_in_pieces(twin.opt, name, len, len));
  c.step();
  twin.step();
  c.params[0]->download();
  twin.params[0]->download();
  EXPECT_EQ(widen(c.params[0]->host), widen(twin.params[0]->host));
}

// Through the engine interface the checkpoint streams use, for a local and an offload engine
// (host memory): after new weights are written and not yet taken up, read_state gives the
// master as the next update will reconcile it (rounding to the new weight where it changed),
// span by span, and leaves the engine's own master alone.
TEST(EngineStateSpans, MastersReadAsTheNextUpdateReconcilesThem) {
  const std::int64_t n = 4099;
  for (const bool offload : {false, true}) {
    SCOPED_TRACE(offload ? "offload engine" : "local engine");
    std::vector<bfloat16> param(static_cast<std::size_t>(n)), grad(param.size());
    std::mt19937 rng(5);
    fill_uniform(param, rng, -1.0f, 1.0f);
    fill_uniform(grad, rng, -1.0f, 1.0f);
    auto engine = offload ? kopt::Impl::make_offload_engine(
                                kopt::MemorySpace::host, kopt::DType::bf16, kopt::AdamConfig{}, {})
                          : kopt::Impl::make_engine(kopt::MemorySpace::host, kopt::DType::bf16,
                                                    kopt::AdamConfig{});
    engine->add_group(kopt::AdamConfig{});
    engine->add("w", kopt::Tensor::from(param.data(), n), kopt::Tensor::from(grad.data(), n), 0);
    engine->step(1.0);
    engine->fence();
    const auto read_master = [&](std::int64_t piece) {
      std::vector<float> master(param.size());
      for (std::int64_t at = 0; at < n; at += piece) {
        kopt::Impl::StateSpan<float> span{at, std::min(piece, n - at), {}};
        span.arrays[kopt::Impl::kMaster] = master.data() + at;
        engine->read_state("w", span);
      }
      return master;
    };
    const std::vector<float> trained = read_master(n);
    for (std::size_t i = 0; i < param.size(); i += 3) param[i] = bfloat16::from_float(0.25f);
    engine->reload_model_params();
    for (const std::int64_t piece : {n, std::int64_t{1000}, std::int64_t{97}}) {
      const std::vector<float> master = read_master(piece);
      for (std::size_t i = 0; i < param.size(); ++i) {
        // A rewritten weight is taken unless the trained master already rounds to it.
        const bool taken = i % 3 == 0 && kopt::Impl::from_float<bfloat16>(trained[i]).bits !=
                                             bfloat16::from_float(0.25f).bits;
        ASSERT_EQ(master[i], taken ? 0.25f : trained[i])
            << "element " << i << ", spans of " << piece;
      }
    }
  }
}

// An array no group uses, kept on request (what a checkpoint load asks for when the file holds
// the amsgrad max of a group that has switched amsgrad off): allocated, written, read back,
// and taken up again when a group switches amsgrad on. A mask beyond Adam's arrays is refused.
TYPED_TEST(StateSpanTest, KeptArraysHoldWhatIsWrittenUntilAGroupUsesThem) {
  const std::size_t n = 1031;
  AdamCase<TypeParam, float, float> c({kopt::AdamConfig{}}, {n});
  c.step();
  EXPECT_EQ(c.opt.held_state_arrays(), 3u);
  EXPECT_THROW(c.opt.keep_state_arrays(8u), kopt::InvalidArgument);
  EXPECT_EQ(c.opt.held_state_arrays(), 3u);
  c.opt.keep_state_arrays(4u);
  c.opt.prepare_step();
  EXPECT_EQ(c.opt.held_state_arrays(), 7u);
  const std::string name = c.name(0);
  const auto len = static_cast<std::int64_t>(n);
  std::vector<float> vmax(n);
  for (std::size_t i = 0; i < n; ++i) vmax[i] = 1.0f + static_cast<float>(i);  // above every v
  c.opt.write_state(name, 0, len, nullptr, nullptr, vmax.data(), nullptr);
  EXPECT_EQ(read_in_pieces(c.opt, name, len, len).vmax, vmax);
  c.step();  // without amsgrad: the kept max is left as it is
  EXPECT_EQ(read_in_pieces(c.opt, name, len, len).vmax, vmax);
  c.opt.config().amsgrad = true;
  c.step();  // with it: the max is taken up, and holds (every v is below it)
  const Arrays after = read_in_pieces(c.opt, name, len, len);
  EXPECT_EQ(after.vmax, vmax);
  EXPECT_NE(after.v, vmax);
}

}  // namespace test_state_spans
}  // namespace
