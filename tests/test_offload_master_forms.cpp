// Offloaded groups (StatePlacement::host, the ZeRO-Offload pipeline) of every master form:
// remainders live on the host beside the arrays, groups without masters update the params
// the pipeline brings (nearest or stochastic rounding). Each steps bitwise like the same group
// kept with its params, holds the bytes its form says, resumes from a checkpoint bitwise with
// the weights loaded before or after, and settles a loaded master's ties as local engines do.
#include <kopt/impl/engine.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <optional>

#include "algorithm_world.hpp"
#include "checkpoint_model.hpp"
#include "test_support.hpp"

namespace {
namespace test_offload_master_forms {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;
using kopt::Rounding;

struct Form {
  const char* name;
  kopt::StateStorage adam, sgd;  // group 0 (AdamW), group 1 (SGD with momentum)
};

kopt::StateStorage stochastic_state(kopt::StateStorage s) {
  s.state_rounding = Rounding::stochastic;
  s.seed = 8;
  return s;
}

std::vector<Form> forms() {
  const auto form = [](MasterStorage master, DType arrays, Rounding rounding = Rounding::nearest) {
    return kopt::StateStorage{.master = master,
                              .arrays = arrays,
                              .rounding = rounding,
                              .seed = rounding == Rounding::stochastic ? 7u : 0u};
  };
  return {{"remainder", form(MasterStorage::remainder, DType::f32),
           form(MasterStorage::remainder, DType::f32)},
          {"remainder, bf16 state", form(MasterStorage::remainder, DType::bf16),
           form(MasterStorage::remainder, DType::bf16)},
          {"remainder, q8 moments", form(MasterStorage::remainder, DType::q8),
           form(MasterStorage::remainder, DType::bf16)},
          {"none, nearest", form(MasterStorage::none, DType::f32),
           form(MasterStorage::none, DType::f16)},
          {"none, stochastic", form(MasterStorage::none, DType::bf16, Rounding::stochastic),
           form(MasterStorage::none, DType::bf16, Rounding::stochastic)},
          {"remainder and f32, state rounded stochastically",
           stochastic_state(form(MasterStorage::remainder, DType::bf16)),
           stochastic_state(form(MasterStorage::f32, DType::f16))},
          {"none, q8 moments and bf16 state rounded stochastically",
           stochastic_state(form(MasterStorage::none, DType::q8, Rounding::stochastic)),
           stochastic_state(form(MasterStorage::none, DType::bf16))}};
}

std::vector<kopt::AlgorithmConfig> configs() {
  return {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
          kopt::SgdConfig{.lr = 0.05, .momentum = 0.9}};
}

// bf16 params with bf16 and f32 grads, and an f32 param (its own master: fp32 on the host),
// cut by pipeline chunks of 768 elements (whole q8 blocks).
std::vector<ParamDef> defs() {
  return {{0, DType::bf16, DType::bf16, false, 1000},
          {0, DType::bf16, DType::f32, false, 8199},
          {0, DType::f32, DType::f32, false, 513},
          {1, DType::bf16, DType::bf16, false, 3},
          {1, DType::bf16, DType::bf16, false, 300}};
}

kopt::HybridOptions options() {
  kopt::HybridOptions o;
  o.max_grad_norm = 5.0;
  o.offload.chunk_elements = 768;  // three q8 blocks: params span pipeline chunks
  return o;
}

std::vector<kopt::StateStorage> storage(const Form& f) { return {f.adam, f.sgd}; }

// Bitwise the same groups kept with their params: params, state, step counts. The host
// holds the local state and one more thing, the f32 param's copy (its master: 4 B per
// element, padded as its group lays out params: 256 elements with q8 arrays, else 16).
TEST(OffloadMasterForms, StepBitwiseLikeLocalGroupsInEveryForm) {
  for (const Form& f : forms()) {
    SCOPED_TRACE(f.name);
    AlgorithmWorld local(configs(), defs(), options(), 12, {}, storage(f));
    AlgorithmWorld offloaded(configs(), defs(), options(), 12, {true, true}, storage(f));
    for (std::size_t j = 0; j < defs().size(); ++j)
      ASSERT_TRUE(offloaded.opt->is_offloaded(offloaded.name(j)));
    for (AlgorithmWorld* w : {&local, &offloaded}) w->train(0, 12);
    EXPECT_EQ(offloaded.all_params(), local.all_params());
    EXPECT_TRUE(saved_params(*offloaded.opt) == saved_params(*local.opt)) << "state differs";
    const std::size_t f32_copy = 4 * (f.adam.any(DType::q8) ? 768u : 528u);
    EXPECT_EQ(total_state_bytes(*offloaded.opt), total_state_bytes(*local.opt) + f32_copy);
  }
}

// Train 10 steps offloaded, save, train 10 more; a fresh offloaded optimizer and a local one,
// given the weights at the save before or after load(), train the same 10 steps and end with
// the uninterrupted run's params and state.
TEST(OffloadMasterForms, SaveAndLoadResumeBitwiseInEveryOrderAndPlacement) {
  for (const Form& f : forms()) {
    SCOPED_TRACE(f.name);
    TempDir dir;
    AlgorithmWorld a(configs(), defs(), options(), 6, {true, true}, storage(f));
    a.train(0, 10);
    a.opt->save(dir.str("ckpt"));
    const auto weights = a.all_params();
    a.train(10, 10);
    const auto end = saved_params(*a.opt);
    for (const bool host : {true, false})
      for (const bool weights_first : {true, false}) {
        SCOPED_TRACE(std::string(host ? "offloaded" : "local") +
                     (weights_first ? ", weights first" : ", weights after"));
        AlgorithmWorld b(configs(), defs(), options(), 6, {host, host}, storage(f));
        b.load(dir.str("ckpt"), weights, weights_first);
        b.train(10, 10);
        EXPECT_EQ(b.all_params(), a.all_params());
        EXPECT_TRUE(saved_params(*b.opt) == end) << "state differs";
      }
  }
}

// A master that is an exact tie with an odd high half, loaded (as from an fp32-master file)
// into an offloaded remainder engine with its param rounded either way, before or after the
// state: the update starts from the file's master. Other weights move the master with them.
TEST(OffloadMasterForms, LoadedTiesTakeTheFileMasterWithEitherRounding) {
  using kopt::Impl::split_master;
  const std::int64_t n = 64;
  std::vector<float> master(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < master.size(); ++i)  // 1.0 + odd ulps of bf16, plus half an ulp
    master[i] = float_of(((0x3f80u + 2 * static_cast<std::uint32_t>(i) + 1) << 16) | 0x8000u);
  for (const bool to_even : {true, false})
    for (const bool weights_first : {true, false}) {
      SCOPED_TRACE(std::string(to_even ? "even" : "truncated") +
                   (weights_first ? ", weights first" : ", weights after"));
      const kopt::AdamConfig frozen{.lr = 0.0};  // lr 0: masters stay
      auto engine = kopt::Impl::make_offload_engine(kopt::MemorySpace::host, DType::bf16, frozen,
                                                    {}, {.master = MasterStorage::remainder});
      engine->add_group(frozen);
      std::vector<kopt::bfloat16> p(master.size()), g(master.size());
      engine->add("p", kopt::Tensor::from(p.data(), n), kopt::Tensor::from(g.data(), n), 0);
      engine->prepare_step();
      std::vector<kopt::bfloat16> weights(master.size());
      for (std::size_t i = 0; i < master.size(); ++i)
        weights[i] =
            to_even ? kopt::bfloat16::from_float(master[i]) : split_master(master[i]).param;
      weights.back() = kopt::bfloat16::from_float(-3.0f);  // other weights
      if (weights_first) p = weights;
      kopt::Impl::StateSpan<const float> in{0, n, {}};
      in.arrays[kopt::Impl::kMaster] = master.data();
      engine->write_state("p", in);
      engine->commit_state("p", 7);
      if (!weights_first) p = weights;
      std::vector<float> after(master.size());
      kopt::Impl::StateSpan<float> out{0, n, {}};
      out.arrays[kopt::Impl::kMaster] = after.data();
      engine->step(1.0);
      engine->fence();
      engine->read_state("p", out);
      std::size_t other = 0;
      for (std::size_t i = 0; i + 1 < master.size(); ++i)
        other += bits_of(after[i]) != bits_of(master[i]);
      EXPECT_EQ(other, 0u) << "elements whose update did not start from the file's master";
      EXPECT_EQ(bits_of(after.back()),
                bits_of(kopt::Impl::join_master(kopt::bfloat16::from_float(-3.0f),
                                                split_master(master.back()).remainder)));
      for (std::size_t i = 0; i + 1 < master.size(); ++i)
        ASSERT_EQ(p[i].bits, split_master(master[i]).param.bits) << i;
    }
}

// The offload engine refuses what its form cannot keep, naming the param: an f32 param
// without fp32 masters (its master is its host copy), an f16 one under remainders.
TEST(OffloadMasterForms, BadParamsAreRefusedNamingThem) {
  std::vector<float> w(4), gw(4);
  std::vector<kopt::float16> h(4), gh(4);
  for (const MasterStorage form : {MasterStorage::remainder, MasterStorage::none}) {
    auto engine = kopt::Impl::make_offload_engine(kopt::MemorySpace::host, DType::bf16,
                                                  kopt::AdamConfig{}, {}, {.master = form});
    engine->add_group(kopt::AdamConfig{});
    expect_error<kopt::InvalidArgument>(
        [&] {
          engine->add("w", kopt::Tensor::from(w.data(), 4), kopt::Tensor::from(gw.data(), 4), 0);
        },
        "parameter 'w' is f32: an offloaded f32 param's master is its fp32 host copy");
  }
  auto engine =
      kopt::Impl::make_offload_engine(kopt::MemorySpace::host, DType::f16, kopt::AdamConfig{}, {},
                                      {.master = MasterStorage::remainder});
  engine->add_group(kopt::AdamConfig{});
  expect_error<kopt::InvalidArgument>(
      [&] {
        engine->add("h", kopt::Tensor::from(h.data(), 4), kopt::Tensor::from(gh.data(), 4), 0);
      },
      "parameter 'h' is f16: masters kept as remainders");
  // Through HybridOptimizer: an f16 param in an offloaded remainder group, named.
  kopt::ParamGroup group(kopt::AdamConfig{}, kopt::StatePlacement::host);
  group.set_master(MasterStorage::remainder)
      .add("h", kopt::Tensor::from(h.data(), 4), kopt::Tensor::from(gh.data(), 4));
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt({group}); },
                                      "parameter 'h' is f16");
}

}  // namespace test_offload_master_forms
}  // namespace
