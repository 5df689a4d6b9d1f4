// q8 blocks a lane vector at a time (kopt/impl/q8_lanes.hpp, q8_code_lanes.hpp) against the
// scalar map they stand in for (Q8Map, kopt/impl/block_q8.hpp, itself checked against a
// search in double by test_block_q8.cpp), bitwise: every code decoded at every scale (and
// by the paired loop's decoding, kopt/impl/q8_pairs.hpp, in either half of a pair); codes
// of floats of every exponent, each side of every rounding boundary, both signs, to nearest
// and stochastically; whole blocks' scales and codes; and narrow_host_loop over q8 arrays
// (the lanes for whole blocks, the staging for a last partial one) against the scalar pieces
// composed: each array decoded, fused_element's update, each block encoded (to nearest, and
// stochastically with the same bits). A build without vector extensions runs the staging
// alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <kopt/impl/policies.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <limits>
#include <random>
#include <vector>

#include "lane_inputs.hpp"

namespace {
namespace test_q8_lanes {

using namespace kopt;
using namespace kopt::Impl;

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
LaneU lanes_of(const std::uint32_t* v) { return load_lanes(v); }

template <bool Root>
void expect_decodes_like_the_map() {
  std::vector<float> scales = {std::numeric_limits<float>::quiet_NaN()};
  for (int e = -126; e <= 127; ++e) scales.push_back(std::ldexp(1.0f, e));
  for (const float scale : scales) {
    for (std::uint32_t c0 = 0; c0 < 256; c0 += lane_count) {
      std::uint32_t codes[lane_count];
      for (int l = 0; l < lane_count; ++l) codes[l] = c0 + static_cast<std::uint32_t>(l);
      const LaneF x = q8_decode_lanes<Root>(lanes_of(codes), scale);
      for (int l = 0; l < lane_count; ++l)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(x[l]),
                  std::bit_cast<std::uint32_t>(q8_decode<Root>(codes[l], scale)))
            << "code " << codes[l] << ", scale " << scale;
    }
  }
}

// The paired loop's decoding (q8_pairs.hpp): 2 * lane_count codes read as pair words, each
// code in turn in the even and the odd half of a word beside every other code.
template <bool Root>
void expect_pairs_decode_like_the_map() {
  std::vector<float> scales = {std::numeric_limits<float>::quiet_NaN()};
  for (int e = -126; e <= 127; ++e) scales.push_back(std::ldexp(1.0f, e));
  for (const float scale : scales) {
    for (std::uint32_t c0 = 0; c0 < 256 * 256; c0 += 2 * lane_count) {
      unsigned char codes[2 * lane_count];
      for (int j = 0; j < 2 * lane_count; ++j) {
        const std::uint32_t pair = (c0 + static_cast<std::uint32_t>(j)) >> 1;
        codes[j] = static_cast<unsigned char>(j % 2 == 0 ? pair & 0xffu : pair >> 8);
      }
      LaneF x[2];
      q8_decode_pairs<Root>(load_code_pairs(codes), scale, x);
      for (int j = 0; j < 2 * lane_count; ++j)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(x[j % 2][j / 2]),
                  std::bit_cast<std::uint32_t>(q8_decode<Root>(codes[j], scale)))
            << "code " << int{codes[j]} << " at " << j << ", scale " << scale;
    }
  }
}

TEST(Q8Lanes, EveryCodeDecodesAtEveryScaleAsTheMapDoes) {
  expect_decodes_like_the_map<false>();
  expect_decodes_like_the_map<true>();
  expect_pairs_decode_like_the_map<false>();
  expect_pairs_decode_like_the_map<true>();
}

TEST(Q8Lanes, EveryScaleInvertsAsADivisionDoes) {
  std::vector<float> scales = {std::numeric_limits<float>::quiet_NaN()};
  for (int e = -126; e <= 127; ++e) scales.push_back(std::ldexp(1.0f, e));
  for (const float scale : scales)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(q8_inverse_scale(scale)),
              std::bit_cast<std::uint32_t>(1.0f / scale))
        << "scale " << scale;
}

// Floats of every exponent: around each point where the dropped mantissa bits round one way
// or the other (half a code step, a whole step), at random, both signs, zeros, Inf and NaN.
std::vector<float> every_exponent() {
  std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(17);
  for (std::uint32_t e = 0; e < 255; ++e)
    for (const std::uint32_t drop : {19u, 20u})
      for (const std::uint32_t at : {0u, 1u << (drop - 1), 1u << drop, 3u << (drop - 1)})
        for (const std::uint32_t near : {at - 1, at, at + 1, static_cast<std::uint32_t>(rng())})
          for (const std::uint32_t sign : {0u, 0x80000000u})
            xs.push_back(std::bit_cast<float>(sign | e << 23 | (near & 0x7fffffu)));
  return xs;
}

template <bool Root>
void expect_encodes_like_the_map() {
  const std::vector<float> xs = every_exponent();
  for (const float inv : {1.0f, 0x1p-20f, 0x1p20f, 0x1p-126f, 0x1p126f}) {
    for (std::size_t i = 0; i + lane_count <= xs.size(); i += lane_count) {
      const LaneU c = q8_encode_lanes<Root>(bits_float(load_lanes(xs.data() + i)), inv);
      for (int l = 0; l < lane_count; ++l)
        ASSERT_EQ(c[l], static_cast<std::uint32_t>(q8_encode<Root>(xs[i + l], inv)))
            << "x " << xs[i + l] << ", inv " << inv;
    }
  }
}

// Rounded stochastically: the same floats, each lane with random bits (and the extremes).
template <bool Root>
void expect_stochastic_codes_like_the_map() {
  const std::vector<float> xs = every_exponent();
  std::mt19937 rng(23);
  for (const float inv : {1.0f, 0x1p-20f, 0x1p20f, 0x1p-126f, 0x1p126f}) {
    for (std::size_t i = 0; i + lane_count <= xs.size(); i += lane_count) {
      LaneU bits;
      for (int l = 0; l < lane_count; ++l) bits[l] = i % 3 == 0 ? (l % 2) * 65535u : rng() >> 16;
      const LaneU c = q8_encode_lanes<Root, true>(bits_float(load_lanes(xs.data() + i)), inv, bits);
      for (int l = 0; l < lane_count; ++l)
        ASSERT_EQ(c[l],
                  static_cast<std::uint32_t>(q8_encode_stochastic<Root>(xs[i + l], inv, bits[l])))
            << "x " << xs[i + l] << ", inv " << inv << ", bits " << bits[l];
    }
  }
}

// Each float's bits at its threshold and one below, where a threshold one off would move
// the code.
template <bool Root>
void expect_stochastic_thresholds_like_the_map() {
  using Map = Q8Map<Root>;
  const std::vector<float> xs = every_exponent();
  for (const float inv : {1.0f, 0x1p-20f, 0x1p20f, 0x1p-126f, 0x1p126f}) {
    for (std::size_t i = 0; i + lane_count <= xs.size(); i += lane_count) {
      for (const std::uint32_t below : {0u, 1u}) {
        LaneU bits;
        for (int l = 0; l < lane_count; ++l) {
          const float x = xs[i + l];
          const float y = Root ? std::sqrt(x < 0.0f ? 0.0f : x) * inv : std::fabs(x * inv);
          const std::uint32_t c = Map::code_down(y);
          const std::uint32_t t = Map::threshold(y, Map::value(c), Map::value(c + 1u));
          bits[l] = t >= below ? t - below : 0u;
        }
        const LaneU c =
            q8_encode_lanes<Root, true>(bits_float(load_lanes(xs.data() + i)), inv, bits);
        for (int l = 0; l < lane_count; ++l)
          ASSERT_EQ(c[l],
                    static_cast<std::uint32_t>(q8_encode_stochastic<Root>(xs[i + l], inv, bits[l])))
              << "x " << xs[i + l] << ", inv " << inv << ", bits " << bits[l];
      }
    }
  }
}

TEST(Q8Lanes, FloatsOfEveryExponentEncodeAsTheMapDoes) {
  expect_encodes_like_the_map<false>();
  expect_encodes_like_the_map<true>();
  expect_stochastic_codes_like_the_map<false>();
  expect_stochastic_codes_like_the_map<true>();
  expect_stochastic_thresholds_like_the_map<false>();
  expect_stochastic_thresholds_like_the_map<true>();
}

// Blocks of values spread over 12 decades, one with zeros alone, one with an Inf, one with
// a NaN, one with subnormals alone.
template <bool Root>
void expect_blocks_like_the_runs() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-40.0f, 0.0f);
  for (int b = 0; b < 40; ++b) {
    std::vector<float> in(q8_block);
    for (float& x : in) {
      x = std::exp2(exponent(rng)) * (rng() % 2 != 0 && !Root ? -1.0f : 1.0f);
      if (b == 1) x = 0.0f;
      if (b == 2) x *= 1e-39f;
    }
    if (b == 3) in[77] = std::numeric_limits<float>::infinity();
    if (b == 4) in[200] = std::numeric_limits<float>::quiet_NaN();
    std::vector<unsigned char> lanes(q8_block_bytes), run(q8_block_bytes);
    q8_encode_block<Root>(in.data(), lanes.data());
    q8_encode_run<Root>(in.data(), run.data(), q8_block);
    EXPECT_EQ(lanes, run) << "block " << b;
    // Stochastically, with the bits of a param's elements past 2^32 (the high word carried).
    const ChunkRounding r{rounding_key(0x5eed, b), (std::int64_t{1} << 32) - 100};
    q8_encode_block<Root>(in.data(), lanes.data(), &r, 40);
    q8_encode_run<Root>(in.data(), run.data(), q8_block, &r, 40);
    EXPECT_EQ(lanes, run) << "block " << b << ", stochastic";
  }
}

TEST(Q8Lanes, WholeBlocksEncodeAsTheRunsDo) {
  expect_blocks_like_the_runs<false>();
  expect_blocks_like_the_runs<true>();
}
#endif

template <class ParamT, class MasterT>
struct Streams {
  std::vector<ParamT> param;
  std::vector<bfloat16> grad;
  std::vector<MasterT> master;
  std::vector<std::vector<unsigned char>> s{3};  // each array's bytes in its dtype
};

// Array k of n elements holding `values` in dtype d.of[k] (rounded as d says, with r's bits).
std::vector<unsigned char> stored(const StateDTypes& d, int k, const std::vector<float>& values,
                                  const ChunkRounding& r = {}) {
  const auto n = static_cast<std::int64_t>(values.size());
  if (d.of[k] == DType::q8) {
    std::vector<unsigned char> bytes(static_cast<std::size_t>(q8_bytes(n)));
    const ChunkRounding rk = r.of_array(k);
    for (std::int64_t i = 0; i < n; i += q8_block)
      q8_encode_run(d.root(k), values.data() + i, q8_block_of(bytes.data(), i),
                    static_cast<int>(std::min<std::int64_t>(q8_block, n - i)),
                    d.stochastic ? &rk : nullptr, i);
    return bytes;
  }
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * (d.of[k] == DType::f32 ? 4 : 2));
  for (std::int64_t i = 0; i < n; ++i) d.store(k, bytes.data(), i, values[i], r);
  return bytes;
}

template <class ParamT, class MasterT>
Streams<ParamT, MasterT> random_streams(std::int64_t n, const StateDTypes& d, unsigned seed) {
  std::mt19937 rng(seed);
  Streams<ParamT, MasterT> s;
  std::vector<float> m, v;
  for (std::int64_t i = 0; i < n; ++i) {
    kopt_test::LaneElement e = kopt_test::lane_element(i, rng);
    // An infinite or NaN grad poisons its block's moments (a NaN scale); the sign of the
    // NaNs they step to next is not specified (the lanes' guard and the element's differ).
    if (!std::isfinite(e.g)) e.g = 3.0f;
    if (!std::isfinite(e.w)) e.w = 0.5f;  // so does a NaN param under Adam's L2 term
    kopt_test::push_master(s.param, s.master, e.w);
    s.grad.push_back(bfloat16::from_float(e.g));
    m.push_back(e.m), v.push_back(e.v);
  }
  s.s[0] = stored(d, 0, m), s.s[1] = stored(d, 1, v);
  for (float& x : v) x *= 1.5f;
  s.s[2] = stored(d, 2, v);
  return s;
}

// The scalar pieces composed: every array widened (q8 decoded), fused_element's update of
// each element, each array stored back (q8 encoded a block at a time).
template <int V, class ParamT, class MasterT>
void reference_step(Streams<ParamT, MasterT>& s, const StateDTypes& d,
                    const AdamStepScalars& scalars, const ChunkRounding& r) {
  const auto n = static_cast<std::int64_t>(s.param.size());
  std::vector<float> f[3];
  for (int k = 0; k < 3; ++k)
    for (std::int64_t i = 0; i < n; ++i) f[k].push_back(d.load(k, s.s[k].data(), i));
  auto* master = s.master.empty() ? nullptr : s.master.data();
  for (std::int64_t i = 0; i < n; ++i)
    fused_element<AdamPolicy, V, ParamT, bfloat16, Form<MasterT, float>>(
        i, s.param.data(), s.grad.data(), master, f[0].data(), f[1].data(), f[2].data(), scalars,
        r);
  constexpr unsigned kept = AdamPolicy::arrays_of(V);
  for (int k = 0; k < 3; ++k)
    if ((kept >> k & 1u) != 0) s.s[k] = stored(d, k, f[k], r);
}

StateDTypes dtypes(DType m, DType v, DType vmax, bool stochastic = false) {
  StateDTypes d;
  d.of[0] = m, d.of[1] = v, d.of[2] = vmax;
  d.roots = AdamConfig::q8_square_arrays;
  d.stochastic = stochastic;
  return d;
}

template <class ParamT, class MasterT>
void expect_loop_like_the_pieces(const AdamConfig& config) {
  using F = Form<MasterT, NarrowState>;
  constexpr auto f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16, q8 = DType::q8;
  visit_variant<AdamPolicy>(AdamPolicy::variant(config), [&](auto v) {
    constexpr int V = decltype(v)::value;
    for (const StateDTypes d :
         {dtypes(q8, q8, q8), dtypes(q8, f32, f32), dtypes(bf16, q8, q8), dtypes(q8, bf16, q8),
          dtypes(q8, f16, q8), dtypes(q8, q8, q8, true), dtypes(q8, f32, q8, true),
          dtypes(q8, bf16, q8, true), dtypes(bf16, q8, f32, true)}) {
      for (const std::int64_t n : {0, 1, 17, 255, 256, 257, 1000, 4096 + 256 + 31}) {
        auto loop = random_streams<ParamT, MasterT>(n, d, static_cast<unsigned>(n));
        auto pieces = loop;
        for (std::int64_t t = 1; t <= 3; ++t) {
          const auto scalars = AdamPolicy::scalars(config, t, 0.5);
          const ChunkRounding r{rounding_key(0x5eed, t), 4099};
          auto* master = loop.master.empty() ? nullptr : loop.master.data();
          narrow_host_loop<AdamPolicy, V, ParamT, bfloat16, F>(
              0, n, loop.param.data(), loop.grad.data(), master, loop.s[0].data(), loop.s[1].data(),
              loop.s[2].data(), d, scalars, r);
          reference_step<V>(pieces, d, scalars, r);
        }
        const auto same = [](const auto& a, const auto& b) {
          return a.size() == b.size() &&
                 (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0);
        };
        EXPECT_TRUE(same(loop.param, pieces.param) && same(loop.master, pieces.master) &&
                    loop.s == pieces.s)
            << "variant " << V << ", dtypes " << name_of(d.of[0]) << " " << name_of(d.of[1]) << " "
            << name_of(d.of[2]) << (d.stochastic ? " stochastic" : "") << ", " << n << " elements";
      }
    }
  });
}

template <class ParamT, class MasterT>
void expect_both_configs() {
  expect_loop_like_the_pieces<ParamT, MasterT>(kopt_test::lane_adamw);
  expect_loop_like_the_pieces<ParamT, MasterT>(kopt_test::lane_amsgrad_l2);
  expect_loop_like_the_pieces<ParamT, MasterT>(kopt_test::lane_amsgrad_adamw);
}

TEST(Q8Lanes, TheHostLoopStepsAsTheScalarPiecesComposed) {
  expect_both_configs<float, float>();
  expect_both_configs<bfloat16, float>();
  expect_both_configs<bfloat16, std::uint16_t>();
  expect_both_configs<bfloat16, RoundToNearest>();
  expect_both_configs<bfloat16, RoundStochastic>();
}

}  // namespace test_q8_lanes
}  // namespace
