// The global grad norm is the same bits however the work is cut: the exact accumulator
// (rounding, order independence), the device team path against the host path, and the
// optimizer's norm and clipped params over groupings, registration orders, engine splits,
// offload and thread counts (the suite runs at 1, 2 and 4 OpenMP threads; Serial is 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <kopt/kopt.hpp>
#include <random>

#include "buffer.hpp"
#include "exact_sum_cases.hpp"

namespace {
namespace test_grad_norm {

using kopt::DType;
using kopt::Impl::ExactSum;
using kopt_test::Buffer;

double value_of(std::initializer_list<double> xs) {
  ExactSum s;
  for (const double x : xs) s.add(x);
  return s.value();
}

TEST(ExactSum, RoundsOnceToNearestEven) {
  const double two53 = std::ldexp(1.0, 53);
  EXPECT_EQ(value_of({two53, 1.0}), two53);                             // a tie: to even
  EXPECT_EQ(value_of({two53, 1.0, std::ldexp(1.0, -298)}), two53 + 2);  // just above the tie
  EXPECT_EQ(value_of({two53 + 2, 1.0}), two53 + 4);                     // a tie: to even
  EXPECT_EQ(value_of({1.0, std::ldexp(1.0, -100)}), 1.0);
  EXPECT_EQ(value_of({std::ldexp(1.0, 260), std::ldexp(1.0, -298)}), std::ldexp(1.0, 260));
  EXPECT_EQ(value_of({std::ldexp(1.0, 200), std::ldexp(1.0, 200)}), std::ldexp(1.0, 201));
  EXPECT_EQ(value_of({std::ldexp(1.0, -298), std::ldexp(1.0, -298)}), std::ldexp(1.0, -297));
  EXPECT_EQ(value_of({}), 0.0);
  EXPECT_EQ(value_of({0.0, -0.0}), 0.0);
  EXPECT_EQ(value_of({1.0, HUGE_VAL}), HUGE_VAL);
  EXPECT_TRUE(std::isnan(value_of({HUGE_VAL, std::nan(""), 1.0})));
  // 0.1 + 0.2: the exact sum of the two doubles, rounded once (a double add rounds too and
  // agrees here; the exact sum differs from 0.3's double).
  EXPECT_EQ(value_of({0.1, 0.2}), 0.1 + 0.2);
}

// Squares of floats of every magnitude, in any order and split in any way: the same digits,
// and the value within half an ulp of a long double sum of the sorted values.
TEST(ExactSum, AnyOrderAndSplitGivesTheSameBits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-149, 127);
  std::vector<double> xs(20000);
  for (double& x : xs) {
    const double f = std::ldexp(mant(rng), expo(rng) / 2);  // squares spread over ~256 binades
    x = static_cast<double>(static_cast<float>(f)) * static_cast<float>(f);
  }
  ExactSum ref;
  for (const double x : xs) ref.add(x);
  ref.normalize();
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(xs.begin(), xs.end(), rng);
    const std::size_t parts = 1 + trial * 7;
    ExactSum total;
    for (std::size_t p = 0; p < parts; ++p) {
      ExactSum part;
      for (std::size_t i = p; i < xs.size(); i += parts) part.add(xs[i]);
      total.join(part);
    }
    total.normalize();
    EXPECT_EQ(std::memcmp(total.digit, ref.digit, sizeof ref.digit), 0) << "trial " << trial;
    EXPECT_EQ(total.value(), ref.value());
  }
  std::sort(xs.begin(), xs.end());
  long double sum = 0;
  for (const double x : xs) sum += x;
  EXPECT_NEAR(ref.value(), static_cast<double>(sum), 1e-16 * static_cast<double>(sum));
}

// ExponentWindow (the host pass's cheap exact adds) gives ExactSum::add's digits: values in
// and out of its window, past its capacity, at both ends of the fixed point, and specials.
TEST(ExactSum, ExponentWindowGivesTheDigitsOfSingleAdds) {
  using kopt::Impl::ExponentWindow;
  kopt_test::for_each_exact_sum_case(3, [](const auto& draw, const std::string& label) {
    ExactSum single, windowed;
    ExponentWindow window;
    for (int i = 0; i < 3 * ExponentWindow::capacity + 17; ++i) {
      const double x = i % 97 == 5 ? 0.0 : draw();
      single.add(x);
      window.add(x, windowed);
    }
    kopt_test::expect_digits_of_single_adds(single, window, windowed, label);
  });
  {  // zeros and specials first: the window is set by the first positive finite value
    ExactSum single, windowed;
    ExponentWindow window;
    for (const double x : {0.0, 0.0, 3.0, std::ldexp(1.0, -200), 5.0, std::ldexp(1.0, 100)}) {
      single.add(x);
      window.add(x, windowed);
    }
    window.flush(windowed);
    single.normalize();
    windowed.normalize();
    EXPECT_EQ(std::memcmp(single.digit, windowed.digit, sizeof single.digit), 0);
    EXPECT_EQ(window.base, 1024 - ExponentWindow::width / 2);  // around 3.0 = 1.5 * 2^1
  }
  for (const double special : {HUGE_VAL, std::nan(""), -std::nan("")}) {
    ExactSum windowed;
    ExponentWindow window;
    window.add(1.0, windowed);
    window.add(special, windowed);
    window.add(3.0, windowed);
    window.flush(windowed);
    EXPECT_EQ(windowed.special, std::isnan(special) ? ExactSum::saw_nan : ExactSum::saw_inf);
  }
}

// The host's vector-FMA block sums (fp32, and bf16 / fp16 read as they are stored) against
// the portable one on the widened floats (devices run that), bitwise, on random blocks of
// every magnitude, with zeros, subnormals and extremes.
template <class T>
void vector_block_sum_matches_portable() {
  SCOPED_TRACE(kopt::name_of(kopt::dtype_of<T>()));
  std::mt19937 rng(9);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::normal_distribution<float> d(0, 1);
  for (int trial = 0; trial < 20000; ++trial) {
    T v[kopt::Impl::norm_block];
    float w[kopt::Impl::norm_block];
    for (int k = 0; k < kopt::Impl::norm_block; ++k) {
      if (trial % 2) {  // any finite bit pattern
        std::uint32_t u = bits(rng);
        if constexpr (std::is_same_v<T, float>) {
          if ((u >> 23 & 0xff) == 0xff) u &= ~(std::uint32_t{1} << 30);
          std::memcpy(&v[k], &u, sizeof u);
        } else {
          const auto exp_bits = std::is_same_v<T, kopt::bfloat16> ? 0x7f80u : 0x7c00u;
          u &= 0xffffu;
          if ((u & exp_bits) == exp_bits) u &= ~0x4000u;
          v[k].bits = static_cast<std::uint16_t>(u);
        }
      } else {
        v[k] = kopt::Impl::from_float<T>(d(rng) * std::ldexp(1.0f, trial % 40 - 20));
      }
      w[k] = kopt::Impl::to_float(v[k]);
    }
    const double a = kopt::Impl::block_sum_of_squares(v);
    const double b = kopt::Impl::block_sum_of_squares_portable(w);
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "trial " << trial << ": " << a << " vs " << b;
  }
}

TEST(GradNorm, VectorBlockSumMatchesThePortableOneBitwise) {
  vector_block_sum_matches_portable<float>();
  vector_block_sum_matches_portable<kopt::bfloat16>();
  vector_block_sum_matches_portable<kopt::float16>();
}

// The device path (one team per chunk, a thread per block, a team reduction) run on the
// host's TeamPolicy gives bitwise the host path's partials and fragments.
template <class GradT>
void team_path_matches_host_path(std::int64_t n, std::int64_t offset, std::int64_t global) {
  using Exec = Kokkos::DefaultHostExecutionSpace;
  SCOPED_TRACE(std::string(kopt::name_of(kopt::dtype_of<GradT>())) + " n " + std::to_string(n) +
               " at " + std::to_string(offset) + " of " + std::to_string(global));
  Buffer g(kopt::dtype_of<GradT>(), false, static_cast<std::size_t>(n));
  std::mt19937 rng(static_cast<unsigned>(n));
  std::normal_distribution<double> d(0, 3);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = d(rng);
  g.set(v);
  Kokkos::View<kopt::Impl::UpdateSlot*, Kokkos::HostSpace> slots("slots", 1);
  slots(0).grad = g.tensor().data;
  slots(0).grad_dtype = g.dtype;
  kopt::Impl::GradNorms<Exec> norms;
  const kopt::Tensor piece = g.tensor().shard_of(global, offset);
  norms.set_pieces(Exec(), "test", {kopt::Impl::norm_piece<Exec>(0, piece)}, 128);
  kopt::Impl::NormParts host, team;
  norms.sums(Exec(), "test", slots, host);
  norms.sums_with_teams(Exec(), "test", slots, team);
  EXPECT_EQ(std::memcmp(host.sum.digit, team.sum.digit, sizeof host.sum.digit), 0);
  ASSERT_EQ(host.fragments.size(), team.fragments.size());
  for (std::size_t f = 0; f < host.fragments.size(); ++f)
    EXPECT_EQ(std::memcmp(host.fragments[f].values, team.fragments[f].values,
                          sizeof(float) * host.fragments[f].count),
              0);
}

TEST(GradNorm, TeamPathMatchesHostPathBitwise) {
  for (const std::int64_t n : {0, 1, 13, 64, 65, 1000, 8199}) {
    team_path_matches_host_path<float>(n, 0, n);
    team_path_matches_host_path<kopt::bfloat16>(n, 0, n);
    team_path_matches_host_path<kopt::float16>(n, 0, n);
    team_path_matches_host_path<float>(n, 7, n + 100);  // both edges cut: fragments
    team_path_matches_host_path<kopt::bfloat16>(n, 64, n + 64);
  }
}

// Five tensors with grads of very different magnitudes, registered in some grouping, order
// and placement; every step's norm and the clipped params are recorded.
struct Layout {
  std::vector<std::size_t> group_of = {0, 0, 0, 0, 0};  // per tensor
  std::vector<std::size_t> order = {0, 1, 2, 3, 4};     // registration order of the tensors
  std::vector<bool> offloaded = {};                     // per group
  DType dtype_of_3 = DType::f32;                        // another dtype: another engine
};
struct Outcome {
  std::vector<double> norms;
  std::vector<std::vector<double>> params;
};

Outcome run(const Layout& l, int steps = 3) {
  const std::size_t sizes[] = {1, 13, 64, 1000, 70001};
  const double magnitude[] = {1e-12, 3.0, 1e6, 1e-3, 0.5};
  std::vector<Buffer> p, g;
  for (std::size_t t = 0; t < 5; ++t) {
    p.emplace_back(t == 3 ? l.dtype_of_3 : DType::f32, false, sizes[t]);
    g.emplace_back(DType::f32, false, sizes[t]);
    p[t].set(std::vector<double>(sizes[t], 0.25));
  }
  std::size_t num_groups = 0;
  for (const std::size_t gr : l.group_of) num_groups = std::max(num_groups, gr + 1);
  std::vector<kopt::ParamGroup> groups;
  for (std::size_t gr = 0; gr < num_groups; ++gr)
    groups.emplace_back(kopt::AdamConfig{.lr = 1e-2}, gr < l.offloaded.size() && l.offloaded[gr]
                                                          ? kopt::StatePlacement::host
                                                          : kopt::StatePlacement::with_params);
  for (const std::size_t t : l.order)
    groups[l.group_of[t]].add("t" + std::to_string(t), p[t].tensor(), g[t].tensor());
  kopt::HybridOptimizer opt(groups, {.max_grad_norm = 1.0});
  Outcome out;
  std::mt19937 rng(17);
  std::normal_distribution<double> d(0, 1);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t t = 0; t < 5; ++t) {
      std::vector<double> v(sizes[t]);
      for (double& x : v) x = magnitude[t] * d(rng);
      g[t].set(v);
    }
    const kopt::StepStats st = opt.step();
    EXPECT_LT(st.clip_factor, 1.0);  // clipping is on in every step
    out.norms.push_back(st.grad_norm);
  }
  for (auto& b : p) out.params.push_back(b.get());
  return out;
}

void expect_same_bits(const Outcome& a, const Outcome& b, bool params, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.norms.size(), b.norms.size());
  for (std::size_t s = 0; s < a.norms.size(); ++s)
    EXPECT_EQ(std::memcmp(&a.norms[s], &b.norms[s], sizeof(double)), 0)
        << "step " << s << ": " << a.norms[s] << " vs " << b.norms[s];
  if (!params) return;
  for (std::size_t t = 0; t < a.params.size(); ++t)
    EXPECT_EQ(a.params[t], b.params[t]) << "tensor " << t;
}

TEST(GradNorm, SameBitsForEveryGroupingOrderEngineAndPlacement) {
  const Outcome base = run(Layout{});
  expect_same_bits(base, run(Layout{.group_of = {0, 1, 2, 0, 1}}), true, "groups 0 1 2 0 1");
  expect_same_bits(base, run(Layout{.order = {4, 3, 2, 1, 0}}), true, "reversed order");
  expect_same_bits(base, run(Layout{.group_of = {1, 0, 1, 0, 1}, .order = {2, 4, 0, 3, 1}}), true,
                   "regrouped and reordered");
  expect_same_bits(base, run(Layout{.group_of = {0, 1, 0, 1, 1}, .offloaded = {false, true}}), true,
                   "two tensors offloaded");
  expect_same_bits(base, run(Layout{.offloaded = {true}}), true, "all offloaded");
  // A bf16 param with the same f32 grads: its own engine; the same norm, step after step.
  const Outcome split = run(Layout{.dtype_of_3 = DType::bf16}, 1);
  expect_same_bits(run(Layout{}, 1), split, false, "a bf16 engine beside the f32 one");
}

// Against an independent long double sum over every element, and against the Serial space
// (one thread) for the thread count: the suite runs this at 1, 2 and 4 OpenMP threads.
TEST(GradNorm, MatchesLongDoubleAndTheSerialSpace) {
  std::mt19937 rng(3);
  std::normal_distribution<double> d(0, 1);
  const std::size_t sizes[] = {0, 1, 13, 65, 8192 + 7, 100003};
  std::vector<Buffer> p, g;
  long double ref = 0;
  for (const std::size_t n : sizes) {
    p.emplace_back(DType::f32, false, n);
    g.emplace_back(DType::bf16, false, n);
    std::vector<double> v(n);
    for (double& x : v) x = d(rng) * std::pow(10.0, static_cast<double>(n % 7) - 3);
    g.back().set(v);
    for (const double x : g.back().get()) ref += static_cast<long double>(x) * x;
  }
  kopt::FusedAdam<Kokkos::DefaultHostExecutionSpace> host(Kokkos::DefaultHostExecutionSpace{});
#ifdef KOKKOS_ENABLE_SERIAL
  kopt::FusedAdam<Kokkos::Serial> serial(Kokkos::Serial{});
#endif
  for (std::size_t j = 0; j < p.size(); ++j) {
    host.add("p" + std::to_string(j), p[j].tensor(), g[j].tensor());
#ifdef KOKKOS_ENABLE_SERIAL
    serial.add("p" + std::to_string(j), p[j].tensor(), g[j].tensor());
#endif
  }
  const double sum = host.grad_sum_of_squares();
  EXPECT_NEAR(sum, static_cast<double>(ref), 1e-15 * static_cast<double>(ref));
#ifdef KOKKOS_ENABLE_SERIAL
  const double one_thread = serial.grad_sum_of_squares();
  EXPECT_EQ(std::memcmp(&sum, &one_thread, sizeof sum), 0) << sum << " vs " << one_thread;
#endif
}

}  // namespace test_grad_norm
}  // namespace
