// MasterStorage::remainder: a bf16 param's fp32 master kept as the param plus a 16-bit
// remainder. The masters (and so every update) are bitwise those of fp32 masters, for every
// algorithm and backend, through save and load in either order and across storage forms, in
// 2 bytes per element instead of 4.
#include <algorithm>
#include <cstring>
#include <kopt/impl/param_remainder.hpp>
#include <random>
#include <type_traits>
#include <variant>

#include "algorithm_world.hpp"
#include "test_support.hpp"

namespace {
namespace test_remainder_masters {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;
using kopt::Impl::split_master;

std::vector<kopt::AlgorithmConfig> algorithms() {
  return {kopt::AdamConfig{.lr = 1e-3, .weight_decay = 0.01},
          kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.1, .decoupled = false, .amsgrad = true},
          kopt::SgdConfig{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
          kopt::LionConfig{.lr = 1e-3, .weight_decay = 0.1},
          kopt::AdagradConfig{.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1}};
}

// bf16 params of sizes 0, 1, odd and large with every grad dtype, and an f32 param (its own
// master: the option leaves it alone), all in group 0.
std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, true, 0},    {0, DType::bf16, DType::bf16, true, 1},
          {0, DType::bf16, DType::f32, true, 17},    {0, DType::bf16, DType::f16, true, 1000},
          {0, DType::bf16, DType::bf16, true, 8199}, {0, DType::f32, DType::bf16, true, 13}};
}

std::uint16_t bf16_bits(double v) { return kopt::bfloat16::from_float(static_cast<float>(v)).bits; }

// Params of world `f` (fp32 masters) and `r` (remainders), both with masters `masters`
// (j -> float bits per element): r's bf16 params are the masters split, f's rounded to even;
// they differ only on odd ties. Returns how many masters have a non-zero remainder.
std::size_t expect_params_of_masters(AlgorithmWorld& f, AlgorithmWorld& r,
                                     const std::map<std::string, SavedParam>& masters) {
  std::size_t inexact = 0;
  for (std::size_t j = 0; j < f.defs.size(); ++j) {
    const std::vector<double> pf = f.params[j].get(), pr = r.params[j].get();
    if (f.defs[j].param == DType::f32) {
      EXPECT_EQ(pf, pr) << f.name(j);
      continue;
    }
    const auto& m = masters.at(f.name(j)).values.back();
    EXPECT_EQ(m.size(), pf.size());
    for (std::size_t i = 0; i < std::min(m.size(), pf.size()); ++i) {
      const float x = float_of(m[i]);
      inexact += (m[i] & 0xffffu) != 0;
      EXPECT_EQ(bf16_bits(pr[i]), split_master(x).param.bits) << f.name(j) << "[" << i << "]";
      EXPECT_EQ(bf16_bits(pf[i]), kopt::bfloat16::from_float(x).bits) << f.name(j);
    }
  }
  return inexact;
}

void expect_same_state(AlgorithmWorld& a, AlgorithmWorld& b) {
  const auto sa = saved_params(*a.opt), sb = saved_params(*b.opt);
  ASSERT_EQ(sa.size(), a.defs.size());
  for (const auto& [name, s] : sa)
    EXPECT_TRUE(sb.count(name) && s == sb.at(name)) << name << ": state differs";
}

std::string describe(const kopt::AlgorithmConfig& c) {
  std::string s = kopt::algorithm_name(c);
  if (const auto* adam = std::get_if<kopt::AdamConfig>(&c)) s += adam->amsgrad ? " amsgrad" : "";
  return s;
}

// 1,000 steps of every algorithm: the state a checkpoint holds (arrays and masters) is
// bitwise the fp32-master run's, and each param is its master rounded as documented.
TEST(RemainderMasters, MastersAreBitwiseThoseOfFp32MastersOver1000Steps) {
  for (const kopt::AlgorithmConfig& config : algorithms()) {
    SCOPED_TRACE(describe(config));
    AlgorithmWorld f({config}, defs(), {}, 5);
    AlgorithmWorld r({config}, defs(), {}, 5, {}, {{.master = MasterStorage::remainder}});
    for (int s = 0; s < 1000; ++s) {
      f.set_grads(s);
      r.set_grads(s);
      f.opt->step();
      r.opt->step();
    }
    expect_same_state(f, r);
    const std::size_t inexact = expect_params_of_masters(f, r, saved_params(*f.opt));
    EXPECT_GT(inexact, 8000u) << "masters that bf16 holds exactly cannot tell the forms apart";
  }
}

// The optimizer keeps 2 bytes per bf16 element for the masters instead of 4, in an engine
// of its own (labelled), and nothing changes for f32 params.
TEST(RemainderMasters, StateBytesCountTwoBytesPerMaster) {
  const kopt::AdamConfig adam;
  AlgorithmWorld f({adam}, defs(), {}, 5);
  AlgorithmWorld r({adam}, defs(), {}, 5, {}, {{.master = MasterStorage::remainder}});
  f.train(0, 1);
  r.train(0, 1);
  std::size_t bf16_elements = 0;  // padded to 16 per param, as the state is laid out
  for (const ParamDef& d : defs())
    if (d.param == DType::bf16) bf16_elements += (d.n + 15) / 16 * 16;
  std::size_t bytes_f = 0, bytes_r = 0;
  for (const auto& [space, b] : f.opt->state_bytes()) bytes_f += b;
  for (const auto& [space, b] : r.opt->state_bytes()) bytes_r += b;
  EXPECT_EQ(bytes_f - bytes_r, 2 * bf16_elements);
  EXPECT_EQ(bytes_r, (2 * 4 + 2) * bf16_elements + 2 * 4 * 16);  // m, v, remainder; f32's m, v
}

// Train 10 steps, save, train 10 more; fresh optimizers given the weights at the save
// before or after load(), with either master form, train the same 10 steps: every one ends
// with the uninterrupted run's masters and state, and its params follow its own form.
TEST(RemainderMasters, SaveAndLoadResumeBitwiseInEveryOrderAndAcrossForms) {
  const std::vector<kopt::AlgorithmConfig> configs = {algorithms()[0], algorithms()[2]};
  for (const kopt::AlgorithmConfig& config : configs)
    for (const MasterStorage saved : {MasterStorage::remainder, MasterStorage::f32}) {
      SCOPED_TRACE(describe(config) + " saved from " + kopt::name_of(saved));
      TempDir dir;
      AlgorithmWorld a({config}, defs(), {}, 6, {}, {{.master = saved}});
      a.train(0, 10);
      a.opt->save(dir.str("ckpt"));
      const auto weights = a.all_params();
      a.train(10, 10);
      const auto end = saved_params(*a.opt);
      for (const MasterStorage loaded : {MasterStorage::remainder, MasterStorage::f32})
        for (const bool weights_first : {true, false}) {
          SCOPED_TRACE(std::string("loaded into ") + kopt::name_of(loaded) +
                       (weights_first ? ", weights first" : ", weights after"));
          AlgorithmWorld b({config}, defs(), {}, 6, {}, {{.master = loaded}});
          b.load(dir.str("ckpt"), weights, weights_first);
          b.train(10, 10);
          const auto got = saved_params(*b.opt);
          for (const auto& [name, s] : end)
            EXPECT_TRUE(got.count(name) && got.at(name) == s) << name << ": state differs";
          // The params follow b's own form: against a run of the other form.
          const MasterStorage other =
              loaded == MasterStorage::f32 ? MasterStorage::remainder : MasterStorage::f32;
          AlgorithmWorld twin({config}, defs(), {}, 6, {}, {{.master = other}});
          twin.train(0, 20);
          if (loaded == MasterStorage::f32)
            expect_params_of_masters(b, twin, end);
          else
            expect_params_of_masters(twin, b, end);
        }
    }
}

// The engine itself, on every backend: remainder masters against fp32 masters, 1,000 Adam
// steps on sizes 0, 1, odd and large; read_state() and state() give the joined master.
template <class Space>
class RemainderEngine : public ::testing::Test {};
TYPED_TEST_SUITE(RemainderEngine, EnabledSpaces, SpaceName);

TYPED_TEST(RemainderEngine, MatchesFp32MastersBitwiseOnEveryBackend) {
  using Space = TypeParam;
  using Opt = kopt::FusedOptimizer<Space, kopt::Impl::AdamPolicy>;
  const kopt::AdamConfig config{.lr = 1e-3, .weight_decay = 0.05};
  Opt f(Space(), config, "f32"),
      r(Space(), config, "remainder", {.master = MasterStorage::remainder});
  EXPECT_EQ(r.storage().master, MasterStorage::remainder);
  const std::size_t sizes[] = {0, 1, 17, 100003};
  std::vector<SpaceArray<kopt::bfloat16, Space>> pf, pr, g;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const std::size_t n : sizes) {
    pf.emplace_back(n), pr.emplace_back(n), g.emplace_back(n);
    for (std::size_t i = 0; i < n; ++i) pf.back().host[i] = kopt::bfloat16::from_float(dist(rng));
    pr.back().host = pf.back().host;
    pf.back().upload(), pr.back().upload();
  }
  for (std::size_t k = 0; k < pf.size(); ++k) {
    f.add("p" + std::to_string(k), pf[k].tensor(), g[k].tensor());
    r.add("p" + std::to_string(k), pr[k].tensor(), g[k].tensor());
  }
  for (int s = 0; s < 1000; ++s) {
    for (auto& grad : g) {
      for (auto& x : grad.host) x = kopt::bfloat16::from_float(dist(rng));
      grad.upload();
    }
    f.step();
    r.step();
  }
  Kokkos::fence();
  EXPECT_EQ(f.state_bytes() - r.state_bytes(), 2 * (16 + 32 + 100016));
  for (std::size_t k = 0; k < pf.size(); ++k) {
    const std::string name = "p" + std::to_string(k);
    const auto n = static_cast<std::int64_t>(sizes[k]);
    std::vector<float> mf(sizes[k]), mr(sizes[k]), vf(sizes[k]), vr(sizes[k]);
    f.read_state(name, 0, n, {nullptr, vf.data(), nullptr, mf.data()});
    r.read_state(name, 0, n, {nullptr, vr.data(), nullptr, mr.data()});
    const auto bits = [](const std::vector<float>& v) {
      std::vector<std::uint32_t> b;
      for (const float x : v) b.push_back(bits_of(x));
      return b;
    };
    EXPECT_EQ(bits(mf), bits(mr)) << name << ": masters differ";
    EXPECT_EQ(bits(vf), bits(vr)) << name << ": exp_avg_sq differs";
    const auto state = r.state(name);
    std::vector<float> joined(sizes[k]);
    Kokkos::deep_copy(
        Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(joined.data(), sizes[k]),
        state.master);
    EXPECT_EQ(joined, mr) << name;
    const auto& hf = pf[k].download();
    const auto& hr = pr[k].download();
    for (std::size_t i = 0; i < sizes[k]; ++i) {
      ASSERT_EQ(hr[i].bits, split_master(mr[i]).param.bits) << name << "[" << i << "]";
      ASSERT_EQ(hf[i].bits, kopt::bfloat16::from_float(mf[i]).bits) << name << "[" << i << "]";
    }
  }
}

// A master that is an exact tie with an odd high half (the only masters whose two
// roundings differ), loaded with the param rounded either way: each engine form takes the
// loaded master. Weights that are neither rounding of it move the master with them.
TYPED_TEST(RemainderEngine, LoadedTiesTakeTheFileMasterWithEitherRounding) {
  using Space = TypeParam;
  using Opt = kopt::FusedOptimizer<Space, kopt::Impl::AdamPolicy>;
  const std::size_t n = 64;
  std::vector<float> master(n);
  for (std::size_t i = 0; i < n; ++i)  // 1.0 + odd ulps of bf16, plus half an ulp
    master[i] = float_of(((0x3f80u + 2 * static_cast<std::uint32_t>(i) + 1) << 16) | 0x8000u);
  for (const MasterStorage form : {MasterStorage::remainder, MasterStorage::f32})
    for (const bool to_even : {true, false})
      for (const bool weights_first : {true, false}) {
        SCOPED_TRACE(std::string(kopt::name_of(form)) + (to_even ? ", even" : ", truncated") +
                     (weights_first ? ", weights first" : ", weights after"));
        Opt opt(Space(), kopt::AdamConfig{.lr = 0.0}, "ties",
                {.master = form});  // lr 0: masters stay
        SpaceArray<kopt::bfloat16, Space> p(n), g(n);
        opt.add("p", p.tensor(), g.tensor());
        opt.prepare_step();
        for (std::size_t i = 0; i < n; ++i)
          p.host[i] =
              to_even ? kopt::bfloat16::from_float(master[i]) : split_master(master[i]).param;
        p.host[n - 1] = kopt::bfloat16::from_float(-3.0f);  // other weights
        if (weights_first) p.upload();
        opt.write_state("p", 0, static_cast<std::int64_t>(n),
                        {nullptr, nullptr, nullptr, master.data()});
        opt.commit_state("p", 7);
        if (!weights_first) p.upload();
        std::vector<float> before(n), after(n);
        opt.read_state("p", 0, static_cast<std::int64_t>(n),
                       {nullptr, nullptr, nullptr, before.data()});
        opt.step();
        Kokkos::fence();
        opt.read_state("p", 0, static_cast<std::int64_t>(n),
                       {nullptr, nullptr, nullptr, after.data()});
        EXPECT_EQ(before, after) << "read_state() before the update is what the update took";
        std::size_t other_masters = 0, other_params = 0;
        for (std::size_t i = 0; i + 1 < n; ++i)
          other_masters += bits_of(after[i]) != bits_of(master[i]);
        EXPECT_EQ(other_masters, 0u)
            << "elements whose update did not start from the file's master";
        // The last param's weights are new: an fp32 master becomes them, a remainder's
        // master is them plus the loaded low half (within one bf16 ulp).
        const float expected = form == MasterStorage::f32
                                   ? -3.0f
                                   : kopt::Impl::join_master(kopt::bfloat16::from_float(-3.0f),
                                                             split_master(master[n - 1]).remainder);
        EXPECT_EQ(bits_of(after[n - 1]), bits_of(expected));
        const auto& h = p.download();
        for (std::size_t i = 0; i + 1 < n; ++i)
          other_params +=
              h[i].bits != (form == MasterStorage::f32 ? kopt::bfloat16::from_float(master[i]).bits
                                                       : split_master(master[i]).param.bits);
        EXPECT_EQ(other_params, 0u) << "params not rounded as their form rounds";
      }
}

// Bad input: refused with the field named, nothing changed.
TEST(RemainderMasters, BadInputIsRefusedNamingIt) {
  kopt::ParamGroup group;
  expect_error<kopt::InvalidArgument>([&] { group.set_master(static_cast<MasterStorage>(7)); },
                                      "invalid MasterStorage 7");
  EXPECT_EQ(group.master(), MasterStorage::f32);

  Buffer p16(DType::f16, false, 8), g16(DType::f16, false, 8);
  group.set_master(MasterStorage::remainder).add("half", p16.tensor(), g16.tensor());
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt({group}); },
                                      "parameter 'half' is f16");

  using Opt = kopt::FusedOptimizer<Kokkos::DefaultHostExecutionSpace, kopt::Impl::AdamPolicy>;
  Opt opt(Kokkos::DefaultHostExecutionSpace(), {}, "engine", {.master = MasterStorage::remainder});
  expect_error<kopt::InvalidArgument>([&] { opt.add("half", p16.tensor(), g16.tensor()); },
                                      "'half' is f16");
  EXPECT_EQ(opt.size(), 0u);
}

// Remainder groups are chosen for offload as fp32-master groups are, counted at their
// remainders' 2 bytes per element (tests/test_offload_master_forms.cpp steps them).
TEST(RemainderMasters, ChosenForOffloadLikeFp32MasterGroups) {
  if (std::is_same_v<DeviceMem, Kokkos::HostSpace>)
    GTEST_SKIP() << "no device memory in this build: only device params are chosen";
  kopt::HybridOptions options;
  options.offload.device_state_budget = 0;  // every device param that may go, goes
  const std::vector<ParamDef> two = {{0, DType::bf16, DType::bf16, true, 100},
                                     {1, DType::bf16, DType::bf16, true, 100}};
  AlgorithmWorld r({kopt::AdamConfig{}, kopt::AdamConfig{}}, two, options, 5, {},
                   {{.master = MasterStorage::remainder}, {.master = MasterStorage::f32}});
  EXPECT_TRUE(r.opt->is_offloaded(r.name(0)));
  EXPECT_TRUE(r.opt->is_offloaded(r.name(1)));
}

}  // namespace test_remainder_masters
}  // namespace
