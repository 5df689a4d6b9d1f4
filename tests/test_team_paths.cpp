// The device code paths, run on the host. Every chunk kernel (the fused update of every
// algorithm, variant, dtype pair and storage form; the master sync; the grad norm) has a
// host path (a range over chunks) and a device path (a league of teams striding through
// each chunk), and only the first runs where there is no GPU. Under ScopedTeamPaths the
// host spaces take the device path (OpenMP with teams of its threads): the same training
// must give bitwise the same params and state, so a device indexing bug fails here.
#include <gtest/gtest.h>

#include <kopt/impl/update_kernel.hpp>
#include <optional>

#include "algorithm_world.hpp"

namespace {
namespace test_team_paths {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;

struct Run {
  std::vector<std::vector<double>> params;
  std::map<std::string, SavedParam> state;
};

// Trains a fresh world 6 steps (clipped: the norm runs too) on one path or the other.
Run train(bool teams, const std::vector<kopt::AlgorithmConfig>& configs,
          const std::vector<ParamDef>& defs, const std::vector<bool>& host_state,
          const std::vector<kopt::StateStorage>& storage) {
  std::optional<kopt::Impl::ScopedTeamPaths> scope;
  if (teams) scope.emplace();
  kopt::HybridOptions options;
  options.max_grad_norm = 0.5;  // below the grads' norm: every step clips
  AlgorithmWorld w(configs, defs, options, 31, host_state, storage);
  w.train(0, 3);
  w.opt->reload_model_params();  // the masters are synced (a kernel of its own) at step 4
  w.train(3, 3);
  return {w.all_params(), saved_params(*w.opt)};
}

// The params and state of two runs of the same training, bitwise.
void expect_same_runs(const Run& range, const Run& teams, const std::vector<ParamDef>& defs) {
  ASSERT_EQ(range.params.size(), teams.params.size());
  for (std::size_t j = 0; j < defs.size(); ++j) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < defs[j].n; ++i)
      differ += bits_of(static_cast<float>(range.params[j][i])) !=
                bits_of(static_cast<float>(teams.params[j][i]));
    EXPECT_EQ(differ, 0u) << "param p" << j << " (" << kopt::name_of(defs[j].param) << "/"
                          << kopt::name_of(defs[j].grad) << ", " << defs[j].n << " elements)";
  }
  for (const auto& [name, s] : range.state)
    EXPECT_TRUE(s == teams.state.at(name)) << name << ": state differs between the paths";
}

void expect_same_on_both_paths(const std::vector<kopt::AlgorithmConfig>& configs,
                               const std::vector<ParamDef>& defs,
                               const std::vector<bool>& host_state = {},
                               const std::vector<kopt::StateStorage>& storage = {}) {
  expect_same_runs(train(false, configs, defs, host_state, storage),
                   train(true, configs, defs, host_state, storage), defs);
}

// Every algorithm and variant (AdamW, Adam with amsgrad, SGD with Nesterov momentum and
// without, Lion, Adagrad, LAMB with its trust ratio and without, Muon, Adafactor), each over params
// of every dtype pair; sizes of one element, odd ones, more than one chunk (8,199 > 8,192), and an
// empty one. Group 1 also offloaded (the host engine's launches).
std::vector<kopt::AlgorithmConfig> every_algorithm() {
  return {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
          kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.1, .decoupled = false, .amsgrad = true},
          kopt::SgdConfig{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
          kopt::SgdConfig{.lr = 0.05},
          kopt::LionConfig{.lr = 1e-3, .weight_decay = 0.1},
          kopt::AdagradConfig{.lr = 0.05, .initial_accumulator_value = 0.1},
          kopt::LambConfig{.lr = 1e-2},  // per-param sums: their team pass and join too
          kopt::LambConfig{.lr = 1e-2, .weight_decay = 0.0, .clamp_trust = true},
          kopt::MuonConfig{.lr = 1e-2},  // its two passes around the Newton-Schulz iteration
          kopt::MuonConfig{.lr = 1e-2, .nesterov = false, .match_rms_adamw = true},
          kopt::AdafactorConfig{.lr = 2e-2},  // its row-factored update
          kopt::AdafactorConfig{.weight_decay = 0.1, .maximize = true}};
}

std::vector<ParamDef> every_dtype_pair(std::size_t groups) {
  const DType types[] = {DType::f32, DType::bf16, DType::f16};
  const std::size_t sizes[] = {1, 13, 8199, 4097, 17, 300, 2, 1000, 65};
  std::vector<ParamDef> defs;
  std::size_t k = 0;
  for (std::size_t g = 0; g < groups; ++g)
    for (const DType p : types)
      for (const DType grad : types) {
        if ((k++ + g) % 3 != 0) continue;  // a third of the pairs per group, all pairs overall
        defs.push_back({g, p, grad, true, sizes[(k + g) % 9]});
      }
  defs.push_back({0, DType::bf16, DType::bf16, true, 0});  // empty: no chunk of its own
  return defs;
}

TEST(TeamPaths, EveryAlgorithmAndDtypePairStepsBitwiseLikeTheHostPath) {
  const auto configs = every_algorithm();
  expect_same_on_both_paths(configs, every_dtype_pair(configs.size()));
  std::vector<bool> offloaded(configs.size(), false);
  offloaded[1] = offloaded[2] = true;
  expect_same_on_both_paths(configs, every_dtype_pair(configs.size()), offloaded);
}

// Every storage form the kernel compiles: fp32 masters with bf16 arrays, remainders with bf16
// arrays, no masters (to nearest with f16 arrays: the staged form; stochastically with bf16
// arrays), remainders beside per-array dtypes (bf16 exp_avg, fp32 exp_avg_sq); LAMB with
// remainders and bf16 arrays, and without masters and f16 arrays (its sums read each form);
// Muon and Adafactor with remainders, and rounding stochastically into their params; Adam's
// q8 arrays (a team encodes each block together): all three with amsgrad, and q8 exp_avg
// beside bf16 exp_avg_sq over remainders; bf16 and f16 arrays rounded stochastically (Adam
// with amsgrad over remainders, SGD momentum without masters), and q8 ones (Adam with
// amsgrad, a bf16 max_exp_avg_sq); all-bf16 arrays rounded stochastically (the host takes
// the all-bf16 loop's vectors where every stream is 16-bit: Adam with amsgrad without
// masters, AdamW over remainders, whose bf16 grads' param has 8,199 elements; and with fp32
// masters, the per-array loop).
TEST(TeamPaths, EveryStorageFormStepsBitwiseLikeTheHostPath) {
  const std::vector<kopt::AlgorithmConfig> configs = {kopt::AdamConfig{.lr = 1e-2},
                                                      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true},
                                                      kopt::SgdConfig{.lr = 0.05, .momentum = 0.9},
                                                      kopt::LionConfig{.lr = 1e-3},
                                                      kopt::AdamConfig{.lr = 1e-2},
                                                      kopt::LambConfig{.lr = 1e-2},
                                                      kopt::LambConfig{.lr = 1e-2},
                                                      kopt::MuonConfig{.lr = 1e-2},
                                                      kopt::MuonConfig{.lr = 1e-2},
                                                      kopt::AdafactorConfig{},
                                                      kopt::AdafactorConfig{},
                                                      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true},
                                                      kopt::AdamConfig{.lr = 1e-2},
                                                      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true},
                                                      kopt::SgdConfig{.lr = 0.05, .momentum = 0.9},
                                                      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true},
                                                      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true},
                                                      kopt::AdamConfig{.lr = 1e-2},
                                                      kopt::AdamConfig{.lr = 1e-2}};
  kopt::StateStorage mixed{.master = MasterStorage::remainder, .arrays = DType::bf16};
  mixed.array_dtypes[1] = DType::f32;
  kopt::StateStorage q8_m{.master = MasterStorage::remainder, .arrays = DType::bf16};
  q8_m.array_dtypes[0] = DType::q8;
  const std::vector<kopt::StateStorage> storage = {
      {.master = MasterStorage::f32, .arrays = DType::bf16},
      {.master = MasterStorage::remainder, .arrays = DType::bf16},
      {.master = MasterStorage::none, .arrays = DType::f16},
      {.master = MasterStorage::none,
       .arrays = DType::bf16,
       .rounding = kopt::Rounding::stochastic,
       .seed = 3},
      mixed,
      {.master = MasterStorage::remainder, .arrays = DType::bf16},  // LAMB: the paired loop
      {.master = MasterStorage::none, .arrays = DType::f16},
      {.master = MasterStorage::remainder, .arrays = DType::bf16},  // Muon
      {.master = MasterStorage::none,
       .arrays = DType::bf16,
       .rounding = kopt::Rounding::stochastic,
       .seed = 5},
      {.master = MasterStorage::remainder},  // Adafactor
      {.master = MasterStorage::none, .rounding = kopt::Rounding::stochastic, .seed = 7},
      {.arrays = DType::q8},
      q8_m,
      {.master = MasterStorage::remainder,  // stochastic state rounding: its own bits per array
       .arrays = DType::bf16,
       .seed = 9,
       .state_rounding = kopt::Rounding::stochastic,
       .array_dtypes = {std::nullopt, DType::f16}},
      {.master = MasterStorage::none,
       .arrays = DType::f16,
       .rounding = kopt::Rounding::stochastic,
       .seed = 10,
       .state_rounding = kopt::Rounding::stochastic},
      {.arrays = DType::q8,  // q8 codes rounded stochastically, beside a bf16 max_exp_avg_sq
       .seed = 11,
       .state_rounding = kopt::Rounding::stochastic,
       .array_dtypes = {std::nullopt, std::nullopt, DType::bf16}},
      {.master = MasterStorage::none,
       .arrays = DType::bf16,
       .rounding = kopt::Rounding::stochastic,
       .seed = 12,
       .state_rounding = kopt::Rounding::stochastic},
      {.arrays = DType::bf16, .seed = 13, .state_rounding = kopt::Rounding::stochastic},
      {.master = MasterStorage::remainder,
       .arrays = DType::bf16,
       .seed = 14,
       .state_rounding = kopt::Rounding::stochastic}};
  std::vector<ParamDef> defs;
  const std::size_t sizes[] = {8199, 17, 1};
  for (std::size_t g = 0; g < configs.size(); ++g)
    for (std::size_t k = 0; k < 3; ++k)  // bf16 params with each grad dtype (f32 in group 0)
      defs.push_back({g, g == 0 && k == 2 ? DType::f32 : DType::bf16,
                      k == 0   ? DType::bf16
                      : k == 1 ? DType::f32
                               : DType::f16,
                      true, sizes[(k + g) % 3]});
  expect_same_on_both_paths(configs, defs, {}, storage);
}

// On a build with a device, the same training with every param in the device's memory and
// in the host's: the device passes that sum in the host's order (LAMB's block sums in a
// shuffle tree, Adafactor's statistics and norms, kopt/impl/item_lanes.hpp) and q8 blocks a
// warp each (to nearest, and stochastically) give the host path's bits. Without a device both runs
// are the host's.
TEST(TeamPaths, DeviceParamsStepBitwiseLikeHostParams) {
  const std::vector<kopt::AlgorithmConfig> configs = {
      kopt::LambConfig{.lr = 1e-2}, kopt::AdafactorConfig{.lr = 2e-2},
      kopt::AdamConfig{.lr = 1e-2, .amsgrad = true}, kopt::AdamConfig{.lr = 1e-2},
      kopt::AdamConfig{.lr = 1e-2}};
  kopt::StateStorage q8_m{.master = MasterStorage::remainder, .arrays = DType::bf16};
  q8_m.array_dtypes[0] = DType::q8;
  kopt::StateStorage q8_stochastic = q8_m;  // each code from a warp's own bits
  q8_stochastic.array_dtypes[1] = DType::q8;
  q8_stochastic.seed = 12;
  q8_stochastic.state_rounding = kopt::Rounding::stochastic;
  const std::vector<kopt::StateStorage> storage = {
      {}, {}, {.arrays = DType::q8}, q8_m, q8_stochastic};
  std::vector<ParamDef> host = every_dtype_pair(configs.size());
  for (ParamDef& d : host) {
    d.on_device = false;
    if (d.group >= 3) d.param = DType::bf16;  // remainders are of bf16 params
  }
  std::vector<ParamDef> device = host;
  for (ParamDef& d : device) d.on_device = true;
  expect_same_runs(train(false, configs, host, {}, storage),
                   train(false, configs, device, {}, storage), host);
}

}  // namespace test_team_paths
}  // namespace
