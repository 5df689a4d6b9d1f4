// A sharded optimizer's collective calls agree across ranks before they move data: input
// refused on one rank only, and ranks built or stepped with different groups, names, sizes,
// options or null grads, make every rank throw (the failed rank its own error, the others
// naming it), and nothing changes anywhere. Before, the other ranks went on into a collective
// the failed one never joined and waited forever, or exchanged mismatched buffers. Needs 2+
// ranks (skips itself in a world of one).
#include <gtest/gtest.h>
#include <mpi.h>

#include <kopt/impl/fault_injection.hpp>
#include <kopt/kopt.hpp>
#include <random>

#include "shared_dir.hpp"
#include "world.hpp"

namespace {
namespace test_rank_agreement {

using kopt_test::Buffer;
using kopt_test::world_rank;
using kopt_test::world_size;

bool last_rank() { return world_rank() == world_size() - 1; }

// Two f32 params and their grads in host memory, the same values on every rank.
struct Model {
  Buffer a{kopt::DType::f32, false, 1001}, b{kopt::DType::f32, false, 37};
  Buffer ga{kopt::DType::f32, false, 1001}, gb{kopt::DType::f32, false, 37};
  explicit Model(unsigned seed) {
    for (Buffer* x : {&a, &b, &ga, &gb}) x->set(random(x->n, seed++));
  }
  static std::vector<double> random(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> d(0.0, 1.0);
    std::vector<double> v(n);
    for (double& x : v) x = d(gen);
    return v;
  }
  std::vector<kopt::ParamGroup> groups(double lr = 1e-2) {
    kopt::ParamGroup g(kopt::AdamConfig{.lr = lr});
    g.add("a", a.tensor(), ga.tensor()).add("b", b.tensor(), gb.tensor());
    return {g};
  }
  std::vector<std::vector<double>> values() { return {a.get(), b.get()}; }
};

kopt::HybridOptions zero2() {
  kopt::HybridOptions o{.max_grad_norm = 1.0};
  return kopt_test::sharded(o, kopt::ZeroStage::two);
}

// `f` throws E on every rank: on `failed` its own message (holding `own`), on the others one
// naming that rank.
template <class E, class F>
void expect_thrown_everywhere(F&& f, int failed, const std::string& own) {
  try {
    f();
    ADD_FAILURE() << "no exception on rank " << world_rank();
  } catch (const E& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(own), std::string::npos) << what;
    if (world_rank() != failed) {
      EXPECT_NE(what.find("failed on rank " + std::to_string(failed) + ": "), std::string::npos)
          << what;
    }
  }
}

// `f` throws kopt::InvalidArgument on every rank, quoting rank 0's and the last rank's
// differing lines, one of which holds `line`.
template <class F>
void expect_ranks_differ(const std::string& line, F&& f) {
  SCOPED_TRACE(line);
  try {
    f();
    ADD_FAILURE() << "no exception on rank " << world_rank();
  } catch (const kopt::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("where rank " + std::to_string(world_size() - 1) + " has"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(line), std::string::npos) << what;
  }
}

// `f` with the last rank's next allocation failing: std::bad_alloc there, a kopt::Error
// naming that rank on the others.
template <class F>
void expect_allocation_failure_everywhere(F&& f) {
  const int last = world_size() - 1;
  if (world_rank() == last) kopt::Impl::set_allocation_failure_after(0);
  try {
    f();
    ADD_FAILURE() << "no exception on rank " << world_rank();
  } catch (const std::bad_alloc&) {
    EXPECT_EQ(world_rank(), last);
  } catch (const kopt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed on rank " + std::to_string(last)),
              std::string::npos)
        << e.what();
  }
  kopt::Impl::set_allocation_failure_after(-1);
}

#define NEEDS_TWO_RANKS() \
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks"

TEST(RankAgreement, ConstructionRefusedOnOneRankThrowsOnEvery) {
  NEEDS_TWO_RANKS();
  const int last = world_size() - 1;
  Model m(1);
  Buffer short_grad(kopt::DType::f32, false, 36);
  expect_thrown_everywhere<kopt::ShapeMismatch>(
      [&] {
        kopt::ParamGroup g(kopt::AdamConfig{.lr = 1e-2});
        g.add("a", m.a.tensor(), m.ga.tensor());
        g.add("b", m.b.tensor(), last_rank() ? short_grad.tensor() : m.gb.tensor());
        kopt::HybridOptimizer opt({g}, zero2());
      },
      last, "'b'");
  // A Muon matrix given as a piece on one rank only (refused there: Muon needs it whole).
  Buffer w(kopt::DType::f32, false, 64), gw(kopt::DType::f32, false, 64);
  expect_thrown_everywhere<kopt::InvalidArgument>(
      [&] {
        kopt::ParamGroup muon(kopt::MuonConfig{});
        kopt::Tensor p = w.tensor().matrix(8, 8), g = gw.tensor().matrix(8, 8);
        if (last_rank()) p = p.shard_of(64, 0), g = g.shard_of(64, 0);
        muon.add("w", p, g);
        std::vector<kopt::ParamGroup> groups = m.groups();
        groups.push_back(muon);
        kopt::HybridOptimizer opt(groups, zero2());
      },
      last, "'w'");
  // The world is still in step: a good optimizer builds and steps on every rank.
  kopt::HybridOptimizer opt(m.groups(), zero2());
  EXPECT_FALSE(opt.step().skipped);
}

TEST(RankAgreement, RanksBuiltDifferentlyAllThrowNamingTheDifference) {
  NEEDS_TWO_RANKS();
  Model m(2);
  Buffer longer(kopt::DType::f32, false, 38);
  expect_ranks_differ("param 'b2'", [&] {
    kopt::ParamGroup g(kopt::AdamConfig{.lr = 1e-2});
    g.add("a", m.a.tensor(), m.ga.tensor())
        .add(last_rank() ? "b2" : "b", m.b.tensor(), m.gb.tensor());
    kopt::HybridOptimizer opt({g}, zero2());
  });
  expect_ranks_differ("38 elements", [&] {
    kopt::ParamGroup g(kopt::AdamConfig{.lr = 1e-2});
    g.add("a", m.a.tensor(), m.ga.tensor());
    g.add("b", last_rank() ? longer.tensor() : m.b.tensor(),
          last_rank() ? kopt::Tensor{} : m.gb.tensor());
    kopt::HybridOptimizer opt({g}, zero2());
  });
  expect_ranks_differ(
      "lr 0.02", [&] { kopt::HybridOptimizer opt(m.groups(last_rank() ? 2e-2 : 1e-2), zero2()); });
  expect_ranks_differ("max_grad_norm: none", [&] {
    kopt::HybridOptions o = zero2();
    if (!last_rank()) o.max_grad_norm.reset();
    kopt::HybridOptimizer opt(m.groups(), o);
  });
  expect_ranks_differ("ZeRO stage 2", [&] {
    kopt::HybridOptimizer opt(
        m.groups(),
        kopt_test::sharded({}, last_rank() ? kopt::ZeroStage::one : kopt::ZeroStage::two));
  });
}

// The pieces of a tensor the training code cut (Tensor::shard_of) must hold each element
// once over the ranks: a gap (state nobody keeps: save() wrote a checkpoint load() refused as
// incomplete) or an overlap (grads counted twice in the clipping norm) is refused on every
// rank, naming the elements and their ranks; the world stays in step, and pieces that tile
// the tensor build and step.
TEST(RankAgreement, PiecesThatDoNotTileTheirTensorAreRefusedOnEveryRank) {
  NEEDS_TWO_RANKS();
  const int me = world_rank(), world = world_size();
  const std::int64_t n = 64 * world;
  Buffer p(kopt::DType::f32, false, 128), g(kopt::DType::f32, false, 128);
  const auto build = [&](std::int64_t offset, std::int64_t count) {
    kopt::ParamGroup group(kopt::AdamConfig{.lr = 1e-2});
    group.add("w", p.tensor().slice(0, count).shard_of(n, offset),
              g.tensor().slice(0, count).shard_of(n, offset));
    kopt::HybridOptimizer opt({group}, zero2());
    opt.step();
  };
  const auto everywhere = [&](const std::string& needle, std::int64_t offset, std::int64_t count) {
    try {
      build(offset, count);
      ADD_FAILURE() << "no exception on rank " << me;
    } catch (const kopt::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("parameter 'w' (" + std::to_string(n) + " elements"),
                std::string::npos)
          << e.what();
    }
  };
  // The last rank's piece 16 short: its last 16 elements are nobody's.
  everywhere(
      "elements [" + std::to_string(n - 16) + ", " + std::to_string(n) + ") are held by no rank",
      64 * me, last_rank() ? 48 : 64);
  // Rank 1's piece starting 16 early: elements [48, 64) are rank 0's and rank 1's.
  everywhere("elements [48, 64) are held by rank 0 and rank 1", me == 1 ? 48 : 64 * me,
             me == 1 ? 80 : 64);
  // Rank 0's piece starting at 16: [0, 16) is nobody's.
  everywhere("elements [0, 16) are held by no rank", me == 0 ? 16 : 64 * me, me == 0 ? 48 : 64);
  EXPECT_NO_THROW(build(64 * me, 64));
  // Any cut that tiles: rank 0 holds nothing, the last rank [0, 128), the others 64 each after.
  const std::int64_t offset = last_rank() ? 0 : 64 * (me + 1);
  EXPECT_NO_THROW(build(me == 0 ? 0 : offset, me == 0 ? 0 : (last_rank() ? 128 : 64)));
}

// A step refused on one rank (an invalid config there, its first state allocation failing
// there, a null grad there only) throws on every rank and changes no param or step count
// anywhere; the next good step matches an optimizer that never saw the refused one.
TEST(RankAgreement, StepRefusedOnOneRankChangesNothingAnywhere) {
  NEEDS_TWO_RANKS();
  const int last = world_size() - 1;
  Model m(3), twin(3);
  kopt::HybridOptimizer opt(m.groups(), zero2()), ref(twin.groups(), zero2());
  const auto unchanged = [&](std::int64_t steps) {
    EXPECT_EQ(m.values(), twin.values());
    EXPECT_EQ(opt.step_count("a"), steps);
    EXPECT_EQ(opt.step_count("b"), steps);
  };
  // Its first step allocates the state: the last rank's allocation fails.
  expect_allocation_failure_everywhere([&] { opt.step(); });
  unchanged(0);
  opt.step(), ref.step();
  unchanged(1);

  if (last_rank()) opt.group(0).config().lr = -1.0;
  expect_thrown_everywhere<kopt::InvalidArgument>([&] { opt.step(); }, last, "lr = -1");
  unchanged(1);
  opt.group(0).config().lr = 1e-2;

  if (last_rank()) opt.set_grad("b", kopt::Tensor{});
  expect_ranks_differ("param 'b': null grad", [&] { opt.step(); });
  unchanged(1);
  opt.set_grad("b", m.gb.tensor());

  // A schedule stepped on one rank only: each shard would be updated with its rank's lr.
  if (last_rank()) opt.group(0).config().lr = 0.5;
  expect_ranks_differ("lr 0.5", [&] { opt.step(); });
  unchanged(1);
  opt.group(0).config().lr = 1e-2;

  opt.step(), ref.step();
  unchanged(2);
}

// save() checks the configs and the state on every rank before any rank writes, and load()
// that every rank reads the same checkpoint (node-local copies of one are the same).
TEST(RankAgreement, CheckpointsRefusedOnOneRankRefusedOnEvery) {
  NEEDS_TWO_RANKS();
  const int last = world_size() - 1;
  Model m(6);
  kopt::HybridOptimizer opt(m.groups(), zero2());
  opt.step();
  const kopt_test::SharedDir one, two;
  if (last_rank()) opt.group(0).config().lr = -1.0;
  expect_thrown_everywhere<kopt::InvalidArgument>([&] { opt.save(one.path); }, last, "lr = -1");
  opt.group(0).config().lr = 1e-2;
  opt.save(one.path);
  opt.step();
  opt.save(two.path);
  expect_ranks_differ("the checkpoint saved as generation",
                      [&] { opt.load(last_rank() ? two.path : one.path); });
  EXPECT_EQ(opt.step_count("a"), 2);  // as before the refused load
  opt.load(one.path);
  EXPECT_EQ(opt.step_count("a"), 1);
}

// load() allocates the state it restores after every rank checked the files: an allocation
// failing on one rank there fails the load on every rank, none of them applying the file.
TEST(RankAgreement, LoadAllocationFailingOnOneRankAppliesNothingAnywhere) {
  NEEDS_TWO_RANKS();
  Model m(4), fresh(5);
  kopt::HybridOptimizer opt(m.groups(), zero2());
  opt.step(), opt.step();
  const kopt_test::SharedDir dir;
  opt.save(dir.path);
  kopt::HybridOptimizer other(fresh.groups(), zero2());  // no state allocated yet
  const std::vector<std::vector<double>> before = fresh.values();
  expect_allocation_failure_everywhere([&] { other.load(dir.path); });
  EXPECT_EQ(other.step_count("a"), 0);
  EXPECT_EQ(other.step_count("b"), 0);
  // Loaded now, it steps on as the saved optimizer does (its params are the saved ones').
  fresh.a.set(m.a.get()), fresh.b.set(m.b.get());
  fresh.ga.set(m.ga.get()), fresh.gb.set(m.gb.get());
  other.load(dir.path);
  EXPECT_EQ(other.step_count("a"), 2);
  opt.step(), other.step();
  EXPECT_EQ(fresh.values(), m.values());
  EXPECT_NE(fresh.values(), before);
}

}  // namespace test_rank_agreement
}  // namespace

#undef NEEDS_TWO_RANKS
