// The paired host loop (kopt/impl/paired_loop.hpp) against the element update it replaces:
// for every form it runs (remainders, no master to nearest, no master stochastically; bf16
// state arrays), every policy and variant, chunk sizes around its strips and pairs and
// chunks that start at odd elements, it must leave bitwise the params, remainders and state
// that fused_element leaves, element by element. Grads that overflow Adam's interpolations
// sit in some strips (1e20, scaled by 0.5: its square is inf, and v stays finite only
// through the guard; inf; NaN), so the unguarded run, its snapshot and the guarded rerun are
// all checked (for Adam's remainder and to-nearest forms, the lane loop's rerun of one
// vector); other strips stay unguarded. Every 97th element has a zero grad and subnormal
// state, which stays subnormal: the lane loop rounds a vector holding one without the CPU's
// bf16 conversion, which would flush it to zero. The overflowing streams also hold
// non-finite params and state past element 600: NaN masters whose remainders carry (a store
// that rounded them as numbers would turn 0x7fffffff into -0), infinities, and signaling
// NaN in an array the guard does not pass (amsgrad's max), which a store must quiet: the
// lane loop rounds without NaN tests only where every value it stores is finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <kopt/impl/policies.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <limits>
#include <random>
#include <vector>

namespace {
namespace test_paired_loop {

using namespace kopt;
using namespace kopt::Impl;

// Every stream of one chunk, as the loop sees it.
struct Streams {
  std::vector<bfloat16> param, grad, s0, s1, s2;
  std::vector<std::uint16_t> remainder;
  bool operator==(const Streams& o) const {
    const auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 2) == 0);  // no null
    };
    return same(param, o.param) && same(s0, o.s0) && same(s1, o.s1) && same(s2, o.s2) &&
           same(remainder, o.remainder);
  }
};

Streams random_streams(std::int64_t n, bool overflow, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Streams s;
  for (std::int64_t i = 0; i < n; ++i) {
    s.param.push_back(bfloat16::from_float(normal(rng)));
    s.grad.push_back(bfloat16::from_float(normal(rng) * 1e-2f));
    s.s0.push_back(bfloat16::from_float(normal(rng) * 1e-3f));
    s.s1.push_back(bfloat16::from_float(std::abs(normal(rng)) * 1e-5f));
    s.s2.push_back(bfloat16::from_float(std::abs(normal(rng)) * 2e-5f));
    s.remainder.push_back(static_cast<std::uint16_t>(rng()));
    if (i % 97 == 5) {
      s.grad.back() = bfloat16{0};
      s.s0.back() = bfloat16{static_cast<std::uint16_t>(0x8000u | (i % 127 + 1))};
      s.s1.back() = bfloat16{static_cast<std::uint16_t>(i % 127 + 1)};
    }
  }
  if (overflow && n > 300) {  // in the second strip only (elements 256..511)
    s.grad[300] = bfloat16::from_float(1e20f);
    if (n > 301) s.grad[301] = bfloat16::from_float(-std::numeric_limits<float>::infinity());
    if (n > 400) s.grad[400] = bfloat16::from_float(std::numeric_limits<float>::quiet_NaN());
    const struct {
      std::int64_t at;
      std::uint16_t param, remainder, s2;
    } odd[] = {{600, 0x7fff, 0xffff, 0x3f80}, {601, 0xffff, 0xffff, 0x3f80},
               {602, 0x7f81, 0x9234, 0x3f80}, {603, 0x7f80, 0x8001, 0x3f80},
               {604, 0xff80, 0x7fff, 0x3f80}, {700, 0x3f80, 0x8001, 0x7f81},
               {701, 0xbf80, 0x0001, 0xff81}, {733, 0x3f80, 0xffff, 0x7fff}};
    for (const auto& e : odd) {
      if (e.at >= n) continue;
      s.param[e.at] = bfloat16{e.param};
      s.remainder[e.at] = e.remainder;
      s.s2[e.at] = bfloat16{e.s2};
    }
  }
  return s;
}

template <class Policy, int V, class F>
void run(Streams& s, std::int64_t begin, const typename Policy::Scalars& scalars,
         std::int64_t first, bool paired) {
  const auto n = static_cast<std::int64_t>(s.param.size());
  auto* master = reinterpret_cast<typename F::MasterT*>(s.remainder.data());
  const ChunkRounding r{rounding_key(0x5eed, 7), first};
  if (paired) {
    paired_host_loop<Policy, V, bfloat16, bfloat16, F>(begin, n, s.param.data(), s.grad.data(),
                                                       master, s.s0.data(), s.s1.data(),
                                                       s.s2.data(), scalars, r);
  } else {
    for (std::int64_t i = begin; i < n; ++i)
      fused_element<Policy, V, bfloat16, bfloat16, F>(i, s.param.data(), s.grad.data(), master,
                                                      s.s0.data(), s.s1.data(), s.s2.data(),
                                                      scalars, r);
  }
}

template <class Policy, class Master>
void expect_paired_like_elements(const typename Policy::Config& config) {
  using F = Form<Master, bfloat16>;
  const int variant = Policy::variant(config);
  visit_variant<Policy>(variant, [&](auto v) {
    constexpr int V = decltype(v)::value;
    static_assert(paired_form<Policy, V, bfloat16, bfloat16, F>);
    for (const std::int64_t n : {0, 1, 2, 3, 63, 255, 256, 257, 511, 513, 1000, 4097}) {
      for (const std::int64_t begin : {std::int64_t{0}, std::int64_t{1}}) {
        if (begin > n) continue;
        for (const bool overflow : {false, true}) {
          Streams paired = random_streams(n, overflow, static_cast<unsigned>(n * 4 + begin));
          Streams elements = paired;
          // Stochastic rounding's element indices: small, or crossing 2^32 within a vector.
          const std::int64_t first = overflow ? (std::int64_t{1} << 32) - 37 : 12345;
          for (std::int64_t t = 1; t <= 3; ++t) {  // steps from the state the last one left
            const auto scalars = Policy::scalars(config, t, 0.5);
            run<Policy, V, F>(paired, begin, scalars, first, true);
            run<Policy, V, F>(elements, begin, scalars, first, false);
          }
          EXPECT_TRUE(paired == elements)
              << Policy::name << " variant " << V << ", " << n << " elements from " << begin
              << (overflow ? ", with overflowing grads, indices across 2^32" : "");
        }
      }
    }
  });
}

template <class Master>
void expect_every_policy() {
  expect_paired_like_elements<AdamPolicy, Master>(AdamConfig{.lr = 1e-3, .weight_decay = 0.01});
  expect_paired_like_elements<AdamPolicy, Master>(
      AdamConfig{.lr = 1e-3, .weight_decay = 0.01, .decoupled = false, .amsgrad = true});
  // AdamW's g leaves the param out: a NaN max beside finite moments reaches the store alone.
  expect_paired_like_elements<AdamPolicy, Master>(AdamConfig{.lr = 1e-3, .amsgrad = true});
  expect_paired_like_elements<SgdPolicy, Master>(
      SgdConfig{.lr = 1e-2, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
  expect_paired_like_elements<SgdPolicy, Master>(SgdConfig{.lr = 1e-2});
  expect_paired_like_elements<LionPolicy, Master>(LionConfig{.lr = 1e-4, .weight_decay = 0.1});
  expect_paired_like_elements<AdagradPolicy, Master>(AdagradConfig{.lr = 1e-2});
}

TEST(PairedLoop, RemainderMastersMatchTheElementUpdateBitwise) {
  expect_every_policy<std::uint16_t>();
}
TEST(PairedLoop, NoMasterToNearestMatchesTheElementUpdateBitwise) {
  expect_every_policy<RoundToNearest>();
}
TEST(PairedLoop, NoMasterStochasticMatchesTheElementUpdateBitwise) {
  expect_every_policy<RoundStochastic>();
}

// The forms it must not take: any fp32 stream (a master, a grad, state arrays).
static_assert(!paired_form<AdamPolicy, 0, bfloat16, bfloat16, Form<float, bfloat16>>);
static_assert(!paired_form<AdamPolicy, 0, bfloat16, float, Form<std::uint16_t, bfloat16>>);
static_assert(!paired_form<AdamPolicy, 0, bfloat16, bfloat16, Form<std::uint16_t, float>>);
static_assert(!paired_form<AdamPolicy, 0, float, float, Form<float, float>>);
static_assert(paired_form<SgdPolicy, 0, bfloat16, bfloat16, Form<RoundToNearest, float>>);

}  // namespace test_paired_loop
}  // namespace
