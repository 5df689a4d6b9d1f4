// Convergence of every state storage option (issue 18): the harness's MLP
// (perf/convergence_run.hpp: 16-32-32-1 tanh regressing a teacher MLP, bf16 params, AdamW
// with warmup and cosine lr, 2,000 steps) trained with each row of
// perf/convergence_options.hpp, against the run with fp32 masters and fp32 state.
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "../perf/convergence_run.hpp"

namespace {
namespace test_convergence {

namespace kc = kopt_convergence;

// How far a row's eval loss after 2,000 steps may lie from the reference's (relative).
// Measured (seed 2026, 1024 held-out samples), the ratio to the reference:
//   fp32_params 0.9988, bf16_remainder 1.0008 (ties apart, the same run: see below),
//   bf16_master_bf16_state 1.0763, bf16_remainder_bf16_state 1.0775,
//   bf16_stochastic_bf16_state 1.0787; bf16_no_master_bf16_state 1.7627 (Expect::worse).
//   Seeds 1-3: bf16-state rows 1.04-1.09, no master to nearest 1.49-1.80.
//   bf16_remainder_q8_m_f32_v 0.9960 (seeds 1-3: 1.004-1.012); bf16_remainder_q8_state
//   0.8648 (seeds 1-3: 0.88-0.93: Expect::no_worse, see convergence_options.hpp).
//   Stochastic state rounding: bf16_remainder_bf16_state_sr 0.9993,
//   bf16_remainder_f16_state_sr 1.0478 (bf16_remainder_f16_state, to nearest: 1.1947),
//   bf16_remainder_q8_state_sr 0.9800.
//   Muon (match_rms_adamw, AdamW's schedule) on the weights of all layers but the output:
//   0.3139 with bf16 params and masters and with fp32 params (Expect::better; 0.3155 and
//   0.3139 with Kokkos Kernels' own gemm instead of OpenBLAS).
// bf16 state costs 8% here because Adam's v moves by (1 - beta2) (g^2 - v): with beta2 =
// 0.999 a fall of v is under half a bf16 ulp and lost, so v only ratchets up and the steps
// shrink (beta2 = 0.99: 1.015; 0.95: 0.999). Broken builds tried (not kept): bf16 state
// stored truncated instead of rounded to nearest: 0.48 (seed 2026; seeds 1-3: 0.50-0.70);
// truncated with remainders 0.48, with stochastic rounding 0.43; the master dropped (the
// no-master row): 1.76. 0.15 keeps every sound row with twice its gap of margin and fails
// each of those.
constexpr double tolerance = 0.15;

// With MasterStorage::remainder the masters are bitwise the fp32 masters, but where a master
// is an exact tie between two bf16 values (one element update in ~131,000 with an odd high
// half) the param rounds toward the truncation where the fp32-master param rounds to even.
// The first such tie changes the next forward pass, and the two runs' losses part (here the
// first of 26 ties is in step 296's update, and the losses differ from step 297 on, by 0.08%
// in the end). So the runs are stepped side by side; wherever the params differ, the
// difference must be that tie (one ulp, the remainder's param the odd one below), and the
// reference's param is set to the remainder's (its master, kopt's own, is untouched). Then
// every step's loss and the final eval loss must be bitwise equal.
TEST(Convergence, RemainderMastersTrainBitwiseLikeFp32MastersTieForTie) {
  const kc::TrainConfig config;
  for (const kc::StorageOption& option : kc::storage_options) {
    if (option.expect != kc::Expect::same_masters) continue;
    ASSERT_EQ(option.params, kopt::DType::bf16) << option.name;
    kc::Training<kopt::bfloat16> reference(kc::reference_option(), config), run(option, config);
    int ties = 0, first_tie = 0;
    for (int step = 1; step <= config.steps; ++step) {
      ASSERT_EQ(reference.step(), run.step()) << option.name << ", step " << step;
      for (std::size_t l = 0; l < run.student().layers.size(); ++l) {
        auto& ref_layer = reference.student().layers[l];
        auto& run_layer = run.student().layers[l];
        for (auto [ref, got] :
             {std::pair(&ref_layer.w, &run_layer.w), std::pair(&ref_layer.b, &run_layer.b)})
          for (std::size_t i = 0; i < got->size(); ++i) {
            kopt::bfloat16& r = (*ref)[i];
            const kopt::bfloat16 g = (*got)[i];
            if (r.bits == g.bits) continue;
            ASSERT_TRUE((g.bits & 1u) == 1u && r.bits == g.bits + 1)
                << option.name << ", step " << step << ", layer " << l << ": param " << g.bits
                << " where the fp32 master's is " << r.bits << ", not a tie";
            r = g;
            if (ties++ == 0) first_tie = step;
          }
      }
    }
    EXPECT_EQ(reference.eval_loss(), run.eval_loss()) << option.name;
    std::printf("%s: %d ties, the first at step %d\n", option.name, ties, first_tie);
  }
}

// Every other row against the reference: Expect::close within the tolerance (no_worse: not
// above it), Expect::worse
// beyond it, Expect::better (Muon on the hidden matrices beside AdamW, issue 19) at most the
// reference's loss; and the reference itself trained (its loss fell 187x, 1.585 to 0.0085).
TEST(Convergence, EveryStorageOptionEndsWithinToleranceOfTheReference) {
  const kc::Curve reference = kc::train(kc::reference_option());
  EXPECT_LT(reference.eval_loss, reference.loss.front() / 100);
  for (const kc::StorageOption& option : kc::storage_options) {
    if (option.expect != kc::Expect::close && option.expect != kc::Expect::no_worse &&
        option.expect != kc::Expect::worse && option.expect != kc::Expect::better)
      continue;
    const double ratio = kc::train(option).eval_loss / reference.eval_loss;
    std::printf("%-28s eval loss / reference %.4f\n", option.name, ratio);
    if (option.expect == kc::Expect::close)
      EXPECT_NEAR(ratio, 1.0, tolerance) << option.name;
    else if (option.expect == kc::Expect::no_worse)
      EXPECT_LE(ratio, 1.0 + tolerance) << option.name;
    else if (option.expect == kc::Expect::better)
      EXPECT_LE(ratio, 1.0) << option.name << ": trains worse than AdamW alone";
    else
      EXPECT_GT(ratio, 1.0 + tolerance) << option.name << ": no longer loses precision?";
  }
}

TEST(Convergence, AnUnknownOptionNameIsRefusedNamingTheKnownOnes) {
  try {
    kc::find_option("bf16_fp8_state");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'bf16_fp8_state'"), std::string::npos) << what;
    for (const kc::StorageOption& option : kc::storage_options)
      EXPECT_NE(what.find(option.name), std::string::npos) << what;
  }
}

}  // namespace test_convergence
}  // namespace
