// Groups without masters (MasterStorage::none): the update runs from the 16-bit param
// widened and is rounded straight back, to nearest or stochastically. Each step of every
// algorithm against a double reference rounded the same way; stochastic rounding unbiased
// (the updates round to nearest loses are kept in expectation), each result a neighbour of
// the fp32 update with the right odds, its bits a function of (seed, step, name, index)
// alone; nothing stored for the masters.
#include <cmath>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <memory>
#include <random>

#include "algorithm_world.hpp"
#include "reference_steps.hpp"
#include "test_support.hpp"

namespace {
namespace test_master_none {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;
using kopt::Rounding;

kopt::StateStorage none(Rounding rounding = Rounding::nearest, std::uint64_t seed = 0,
                        DType arrays = DType::f32) {
  return {.master = MasterStorage::none, .arrays = arrays, .rounding = rounding, .seed = seed};
}

template <class P>
std::int64_t ulps_apart(double expected, P got) {
  const auto e =
      static_cast<std::int64_t>(kopt::Impl::from_float<P>(static_cast<float>(expected)).bits);
  return std::abs(e - static_cast<std::int64_t>(got.bits));
}

// 30 steps of `config` with MasterStorage::none, rounded to nearest, on 16-bit params of
// sizes 0, 1, 17 and 1,000: each step against `step`, a double step from the param widened
// and the arrays kopt held before it. Each new param is the reference's rounded to nearest
// (all but a few bitwise: fp32 and double may round a near-tie apart; none more than 1 ulp).
template <class Space, class Policy, class P>
void expect_params_round_to_nearest(const typename Policy::Config& config, DType arrays,
                                    const ReferenceStep& step) {
  const std::size_t sizes[] = {0, 1, 17, 1000};
  kopt::FusedOptimizer<Space, Policy> opt(Space(), config, "kopt::no_master",
                                          none(Rounding::nearest, 0, arrays));
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto [params, grads] = add_random_params<P, Space>(opt, sizes, rng);
  std::size_t exact = 0, total = 0, far = 0;
  for (int t = 1; t <= 30; ++t) {
    // Before the step: each param widened, its arrays, the grads.
    std::vector<std::vector<double>> p(params.size()), g(params.size());
    std::vector<std::array<std::vector<double>, 3>> s(params.size());
    for (std::size_t j = 0; j < params.size(); ++j) {
      const std::size_t n = sizes[j];
      for (auto& x : grads[j]->host) x = kopt::Impl::from_float<P>(dist(rng));
      grads[j]->upload();
      std::array<std::vector<float>, 3> arrays;
      std::vector<float> master(n);
      for (auto& a : arrays) a.assign(n, 0.0f);
      opt.read_state("p" + std::to_string(j), 0, static_cast<std::int64_t>(n),
                     {arrays[0].data(), arrays[1].data(), arrays[2].data(), master.data()});
      p[j] = widen(params[j]->download()), g[j] = widen(grads[j]->host);
      for (std::size_t i = 0; i < n; ++i)  // the master it reports is the param widened
        ASSERT_EQ(bits_of(master[i]), bits_of(static_cast<float>(p[j][i]))) << i;
      for (std::size_t k = 0; k < 3; ++k) s[j][k].assign(arrays[k].begin(), arrays[k].end());
    }
    opt.step();
    for (std::size_t j = 0; j < params.size(); ++j) {
      std::vector<char> uncertain(sizes[j], 0);
      step(t, p[j], g[j], s[j], uncertain);
      const std::vector<P>& after = params[j]->download();
      for (std::size_t i = 0; i < sizes[j]; ++i) {
        if (uncertain[i]) continue;
        const std::int64_t d = ulps_apart(p[j][i], after[i]);
        exact += d == 0;
        far += d > 1;
        ++total;
      }
    }
  }
  EXPECT_EQ(far, 0u) << "params more than one ulp from the rounded reference";
  EXPECT_GE(exact, total - total / 100) << "of " << total << " params";
  EXPECT_GT(total, 0u);
}

template <class Space>
class NoMaster : public ::testing::Test {};
TYPED_TEST_SUITE(NoMaster, EnabledSpaces, SpaceName);

TYPED_TEST(NoMaster, NearestStepsMatchTheRoundedReference) {
  using Space = TypeParam;
  using kopt::bfloat16;
  using kopt::float16;
  using namespace kopt::Impl;
  const kopt::AdamConfig adam{.lr = 1e-2, .weight_decay = 0.01};
  expect_params_round_to_nearest<Space, AdamPolicy, bfloat16>(adam, DType::f32, adam_step(adam));
  expect_params_round_to_nearest<Space, AdamPolicy, float16>(adam, DType::f32, adam_step(adam));
  expect_params_round_to_nearest<Space, AdamPolicy, bfloat16>(adam, DType::bf16, adam_step(adam));
  expect_params_round_to_nearest<Space, AdamPolicy, float16>(adam, DType::f16, adam_step(adam));
  const kopt::SgdConfig sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  expect_params_round_to_nearest<Space, SgdPolicy, bfloat16>(sgd, DType::f32, sgd_step(sgd));
  expect_params_round_to_nearest<Space, SgdPolicy, float16>(sgd, DType::f32, sgd_step(sgd));
  expect_params_round_to_nearest<Space, SgdPolicy, bfloat16>(sgd, DType::f16, sgd_step(sgd));
  const kopt::AdagradConfig adagrad{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1};
  expect_params_round_to_nearest<Space, AdagradPolicy, bfloat16>(adagrad, DType::f32,
                                                                 adagrad_step(adagrad));
  const kopt::LionConfig lion{.lr = 1e-2, .weight_decay = 0.1};
  expect_params_round_to_nearest<Space, LionPolicy, bfloat16>(lion, DType::f32, lion_step(lion));
}

// Plain SGD moving every param by a quarter of its ulp per step, up from +1 or down from -1:
// rounded to nearest, no param ever moves; stochastically, a quarter of them move at the
// first step, and after 100 steps their mean is the exact sum of the updates (within 6.5
// standard deviations of the rounding noise), each param within a few ulps of it.
TYPED_TEST(NoMaster, StochasticRoundingKeepsUpdatesBelowHalfAnUlpInExpectation) {
  using Space = TypeParam;
  using kopt::bfloat16;
  const std::size_t n = 1 << 16;
  const double quarter = std::ldexp(1.0, -9);  // bf16's ulp in [1, 2) is 2^-7
  for (const Rounding rounding : {Rounding::nearest, Rounding::stochastic}) {
    SCOPED_TRACE(kopt::name_of(rounding));
    SpaceArray<bfloat16, Space> w(n), g(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float sign = i % 2 == 0 ? 1.0f : -1.0f;
      w.host[i] = bfloat16::from_float(sign);
      g.host[i] = bfloat16::from_float(-sign);  // moves |w| up
    }
    w.upload();
    g.upload();
    kopt::FusedOptimizer<Space, kopt::Impl::SgdPolicy> opt(
        Space(), kopt::SgdConfig{.lr = quarter}, "kopt::no_master",
        none(rounding, rounding == Rounding::stochastic ? 42 : 0));
    opt.add("w", w.tensor(), g.tensor());
    const auto mean_magnitude = [&] {
      double sum = 0.0;
      for (const bfloat16 x : w.download()) sum += std::abs(x.to_float());
      return sum / static_cast<double>(n);
    };
    opt.step();
    std::size_t moved = 0;
    for (const bfloat16 x : w.download()) moved += std::abs(x.to_float()) != 1.0f;
    for (int t = 2; t <= 100; ++t) opt.step();
    if (rounding == Rounding::nearest) {
      EXPECT_EQ(moved, 0u);
      EXPECT_EQ(mean_magnitude(), 1.0);
      continue;
    }
    const double up = static_cast<double>(moved) / static_cast<double>(n);
    EXPECT_NEAR(up, 0.25, 5 * std::sqrt(0.25 * 0.75 / static_cast<double>(n)));
    const double noise = std::sqrt(100.0) * std::ldexp(1.0, -7) / 2 / std::sqrt(double(n));
    EXPECT_NEAR(mean_magnitude(), 1.0 + 100 * quarter, 6.5 * noise);
    // Each param's error is a sum of 100 independent roundings (at most 5 ulps RMS); bits
    // that did not change with the step would move a quarter of the params every step and
    // the rest never (43 ulps RMS), unbiased on average all the same.
    double square = 0.0;
    for (const bfloat16 x : w.download())
      square += std::pow((std::abs(x.to_float()) - 1.0 - 100 * quarter) / std::ldexp(1.0, -7), 2);
    EXPECT_LE(std::sqrt(square / static_cast<double>(n)), 6.0) << "RMS error in ulps";
  }
}

// One SGD step (random grads: the fp32 results' low bits spread evenly) on random bf16
// params (sizes 0, 1, 17, 100,003): each result is one of the two bf16 neighbours of the
// update an fp32 param of the same value gets (kopt's own fp32 path, the same arithmetic),
// rounded up in magnitude with probability (its low 16 bits) / 65536: checked per eighth of
// that fraction, within 5 standard deviations.
TYPED_TEST(NoMaster, StochasticResultsAreNeighboursOfTheFp32UpdateWithTheRightOdds) {
  using Space = TypeParam;
  using kopt::bfloat16;
  const kopt::SgdConfig sgd{.lr = 3e-3, .weight_decay = 0.1};
  std::array<std::size_t, 8> count{}, up{};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{100003}}) {
    SpaceArray<bfloat16, Space> w(n), g(n);
    SpaceArray<float, Space> wide(n), wide_g(n);
    for (std::size_t i = 0; i < n; ++i) {
      w.host[i] = bfloat16::from_float(dist(rng));
      g.host[i] = bfloat16::from_float(dist(rng));
      wide.host[i] = w.host[i].to_float();
      wide_g.host[i] = g.host[i].to_float();
    }
    w.upload(), g.upload(), wide.upload(), wide_g.upload();
    kopt::FusedOptimizer<Space, kopt::Impl::SgdPolicy> sr(Space(), sgd, "sr",
                                                          none(Rounding::stochastic, 9));
    kopt::FusedOptimizer<Space, kopt::Impl::SgdPolicy> fp32(Space(), sgd, "fp32");
    sr.add("w", w.tensor(), g.tensor());
    fp32.add("w", wide.tensor(), wide_g.tensor());
    sr.step();
    fp32.step();
    const std::vector<bfloat16>& got = w.download();
    const std::vector<float>& value = wide.download();
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t bits = bits_of(value[i]);
      const auto below = static_cast<std::uint16_t>(bits >> 16);
      ASSERT_TRUE(got[i].bits == below || got[i].bits == below + 1)
          << i << ": " << got[i].to_float() << " is no neighbour of " << value[i];
      const std::size_t eighth = (bits & 0xffffu) >> 13;
      ++count[eighth];
      up[eighth] += got[i].bits != below;
    }
  }
  for (std::size_t k = 0; k < 8; ++k) {
    SCOPED_TRACE("fraction in [" + std::to_string(k) + "/8, " + std::to_string(k + 1) + "/8)");
    ASSERT_GT(count[k], 5000u);
    const double rate = static_cast<double>(up[k]) / static_cast<double>(count[k]);
    const double p = (k + 0.5) / 8, sd = std::sqrt(0.25 / static_cast<double>(count[k]));
    EXPECT_NEAR(rate, p, 1.0 / 16 + 5 * sd);  // the fraction spreads over its eighth
  }
}

// 5 AdamW steps of a 20,000-element bf16 param: the params depend on (seed, step, name,
// element index) only. The same on this space and the default host space; the param cut
// into two shards at an odd offset, each in an engine of its own (as ZeRO and FSDP hold
// them), gives the whole one's bits; another seed, or another name, other bits.
TYPED_TEST(NoMaster, StochasticBitsDependOnSeedStepNameAndIndexAlone) {
  using Space = TypeParam;
  using Host = Kokkos::DefaultHostExecutionSpace;
  using kopt::bfloat16;
  const std::size_t n = 20000, cut = 7001;
  std::vector<bfloat16> w0(n), g0(n);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (std::size_t i = 0; i < n; ++i)
    w0[i] = bfloat16::from_float(dist(rng)), g0[i] = bfloat16::from_float(dist(rng));
  const auto run = [&]<class S>(S, std::uint64_t seed, const std::string& name,
                                std::vector<std::pair<std::size_t, std::size_t>> parts) {
    SpaceArray<bfloat16, S> w(n), g(n);
    w.host = w0, g.host = g0;
    w.upload(), g.upload();
    std::vector<std::unique_ptr<kopt::FusedOptimizer<S, kopt::Impl::AdamPolicy>>> engines;
    for (const auto& [begin, count] : parts) {
      engines.push_back(std::make_unique<kopt::FusedOptimizer<S, kopt::Impl::AdamPolicy>>(
          S(), kopt::AdamConfig{.lr = 1e-3}, "part", none(Rounding::stochastic, seed)));
      const auto b = static_cast<std::int64_t>(begin), c = static_cast<std::int64_t>(count);
      engines.back()->add(name, w.tensor().slice(b, c).shard_of(n, b),
                          g.tensor().slice(b, c).shard_of(n, b));
      // Its bits are keyed by where the piece sits: a rebind may not move it.
      const kopt::Tensor piece = w.tensor().slice(b, c);
      std::vector<kopt::Tensor> moves = {piece.shard_of(n + 1, b)};
      if (b > 0) moves.push_back(piece.shard_of(n, b - 1));  // the first: its tensor alone
      for (const kopt::Tensor& moved : moves)
        expect_error<kopt::ShapeMismatch>([&] { engines.back()->rebind(name, moved, {}); },
                                          "rebind replaces memory, not shape");
      engines.back()->rebind(name, w.tensor().slice(b, c).shard_of(n, b),
                             g.tensor().slice(b, c).shard_of(n, b));  // the same place
    }
    for (int t = 0; t < 5; ++t)
      for (auto& e : engines) e->step();
    return w.download();
  };
  const std::vector<std::pair<std::size_t, std::size_t>> whole = {{0, n}},
                                                         shards = {{0, cut}, {cut, n - cut}};
  const std::vector<bfloat16> base = run(Space(), 3, "w", whole);
  const auto differ = [&](const std::vector<bfloat16>& other) {
    std::size_t d = 0;
    for (std::size_t i = 0; i < n; ++i) d += other[i].bits != base[i].bits;
    return d;
  };
  EXPECT_EQ(differ(run(Host(), 3, "w", whole)), 0u) << "another space, other bits";
  EXPECT_EQ(differ(run(Space(), 3, "w", shards)), 0u) << "sharded, other bits";
  EXPECT_GT(differ(run(Space(), 4, "w", whole)), n / 20) << "the seed changes nothing";
  EXPECT_GT(differ(run(Space(), 3, "v", whole)), n / 20) << "the name changes nothing";
}

// Through the optimizer: group 0 rounds stochastically beside bf16 arrays (14 bytes per
// element of a bf16 AdamW step), group 1 to nearest beside fp32 arrays.
const std::vector<kopt::StateStorage> kNoMasters = {none(Rounding::stochastic, 11, DType::bf16),
                                                    none()};

std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, true, 1000},
          {0, DType::f32, DType::f32, true, 8199},
          {1, DType::bf16, DType::f32, true, 17},
          {1, DType::f16, DType::f16, true, 13}};
}

std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2}, kopt::SgdConfig{.lr = 0.05, .momentum = 0.9}};
}

kopt::HybridOptions clipped() {
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  return options;
}

// A save resumes bitwise (the step count keys the random bits), with the weights written
// before or after load().
TEST(NoMasterOptimizer, SaveAndLoadResumeBitwise) {
  expect_resumes_bitwise(
      [] { return AlgorithmWorld(configs(), defs(), clipped(), 8, {}, kNoMasters); });
}

// The file holds each 16-bit param's master as the param widened, so fp32-master groups
// load it like any checkpoint of theirs; a group without masters loads a file's arrays and
// keeps its own params (the file's masters are not weights: the training code loads those).
TEST(NoMasterOptimizer, CheckpointsLoadAcrossMasterForms) {
  TempDir dir;
  AlgorithmWorld bare(configs(), defs(), clipped(), 9, {}, kNoMasters);
  AlgorithmWorld masters(configs(), defs(), clipped(), 9);
  bare.train(0, 5);
  masters.train(0, 5);
  bare.opt->save(dir.str("bare"));
  masters.opt->save(dir.str("masters"));
  const auto bare_state = saved_params(dir.str("bare"));
  for (std::size_t j = 0; j < defs().size(); ++j) {
    if (defs()[j].param == DType::f32) continue;
    const SavedParam& s = bare_state.at(AlgorithmWorld::name(j));
    ASSERT_TRUE(s.has_master);
    const std::vector<double> w = bare.params[j].get();
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(s.values.back()[i], bits_of(static_cast<float>(w[i]))) << j << " [" << i << "]";
  }
  AlgorithmWorld into_masters(configs(), defs(), clipped(), 9);
  for (std::size_t j = 0; j < defs().size(); ++j) into_masters.params[j].set(bare.params[j].get());
  into_masters.opt->load(dir.str("bare"));
  EXPECT_TRUE(saved_params(*into_masters.opt) == saved_params(*bare.opt));

  const std::vector<kopt::StateStorage> nearest = {none(), none()};  // fp32 arrays, as the file
  AlgorithmWorld into_bare(configs(), defs(), clipped(), 9, {}, nearest);
  into_bare.opt->load(dir.str("masters"));
  for (std::size_t j = 0; j < defs().size(); ++j) into_bare.params[j].set(masters.params[j].get());
  const auto masters_state = saved_params(dir.str("masters"));
  for (const auto& [name, s] : saved_params(*into_bare.opt)) {
    SavedParam expected = masters_state.at(name);
    if (expected.has_master) {  // the param widened, not the file's master
      const std::size_t j = static_cast<std::size_t>(std::stoi(name.substr(1)));
      const std::vector<double> w = masters.params[j].get();
      for (std::size_t i = 0; i < w.size(); ++i)
        expected.values.back()[i] = bits_of(static_cast<float>(w[i]));
    }
    EXPECT_TRUE(s == expected) << name;
  }
}

// Nothing is stored for the masters: AdamW keeps 2 bf16 arrays (4 bytes per element).
TEST(NoMasterOptimizer, StateBytesCountNoMasters) {
  AlgorithmWorld w(
      {kopt::AdamConfig{}},
      {{0, DType::bf16, DType::bf16, true, 1000}, {0, DType::f32, DType::f32, true, 8199}}, {}, 3,
      {}, {kNoMasters[0]});
  w.train(0, 1);
  std::size_t bytes = 0;
  for (const auto& [space, b] : w.opt->state_bytes()) bytes += b;
  EXPECT_EQ(bytes, (2 + 2) * 1008u + (2 + 2) * 8208u);
}

TEST(NoMasterOptimizer, BadInputIsRefusedNamingIt) {
  kopt::ParamGroup group;
  expect_error<kopt::InvalidArgument>([&] { group.set_rounding(Rounding::stochastic, 1); },
                                      "only a group without masters");
  group.set_master(MasterStorage::none);
  expect_error<kopt::InvalidArgument>([&] { group.set_rounding(Rounding::nearest, 5); },
                                      "StateStorage.seed = 5");
  expect_error<kopt::InvalidArgument>([&] { group.set_rounding(static_cast<Rounding>(7)); },
                                      "invalid Rounding 7");
  expect_error<kopt::InvalidArgument>([&] { group.set_master(static_cast<MasterStorage>(9)); },
                                      "invalid MasterStorage 9");
  EXPECT_EQ(group.storage(), none());
  group.set_rounding(Rounding::stochastic, 5);
  group.set_master(MasterStorage::f32);  // rounding belongs to groups without masters
  EXPECT_EQ(group.storage(), kopt::StateStorage{});

  // Stochastic rounding is of bf16 params: an f16 one is refused, naming it.
  std::vector<kopt::float16> h(4);
  std::vector<float> hg(4);
  kopt::ParamGroup sr;
  sr.set_master(MasterStorage::none).set_rounding(Rounding::stochastic, 1);
  sr.add("h", kopt::Tensor::from(h.data(), 4), kopt::Tensor::from(hg.data(), 4));
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt({sr}); }, "'h' is f16");
  using Opt = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::AdamPolicy>;
  Opt opt(Kokkos::DefaultHostExecutionSpace(), {}, "engine", none(Rounding::stochastic, 1));
  expect_error<kopt::InvalidArgument>(
      [&] { opt.add("h", kopt::Tensor::from(h.data(), 4), kopt::Tensor::from(hg.data(), 4)); },
      "'h' is f16");
}

}  // namespace test_master_none
}  // namespace
