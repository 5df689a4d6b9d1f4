#pragma once
// The model of the convergence harness (perf/convergence_run.hpp): a tanh MLP in plain C++
// on the host, its forward and backward pass written out, params in P (kopt::bfloat16, or
// float for the fp32 baseline) where kopt updates them, grads in fp32. Small enough that
// training it 2,000 steps takes a fraction of a second, so the test suite can afford one run
// per storage option.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/storage_types.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace kopt_convergence {

inline float widen(float x) { return x; }
inline float widen(kopt::bfloat16 x) { return x.to_float(); }
template <class P>
P narrow(float x) {
  if constexpr (std::is_same_v<P, float>)
    return x;
  else
    return P::from_float(x);
}

/// splitmix64 and Box-Muller: the same algorithm with every standard library
/// (std::normal_distribution's is the library's choice).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// In (0, 1]: never 0, so log() below is finite.
  double uniform() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }
  float normal() {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    return static_cast<float>(r * std::cos(6.283185307179586 * uniform()));
  }

 private:
  std::uint64_t state_;
};

/// A dense layer: params w (out x in, row-major) and b in P, their fp32 grads, and the
/// weights widened once per pass in both layouts, so that every inner loop below runs over
/// contiguous memory without a reduction (the compiler vectorizes it without reassociating).
template <class P>
struct Layer {
  int in = 0, out = 0;
  std::vector<P> w, b;
  std::vector<float> dw, db;
  std::vector<float> wf, wt;  // w widened: (out x in) and transposed (in x out)

  Layer(int in_, int out_, Rng& rng)
      : in(in_),
        out(out_),
        w(in_ * out_),
        b(out_),
        dw(in_ * out_),
        db(out_),
        wf(in_ * out_),
        wt(in_ * out_) {
    // Unit-variance outputs; values rounded to bf16 whatever P is, so that the fp32-params
    // run starts from the same weights as the bf16 ones.
    const float scale = 1.0f / std::sqrt(static_cast<float>(in));
    for (auto& x : w) x = narrow<P>(widen(narrow<kopt::bfloat16>(scale * rng.normal())));
    for (auto& x : b) x = narrow<P>(widen(narrow<kopt::bfloat16>(0.1f * rng.normal())));
  }
  void widen_weights() {
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i) wf[o * in + i] = wt[i * out + o] = widen(w[o * in + i]);
  }
};

/// sizes[0] inputs, tanh hidden layers, a linear output layer; loss: mean squared error.
template <class P>
class Mlp {
 public:
  Mlp(const std::vector<int>& sizes, Rng& rng) {
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l)
      layers.emplace_back(sizes[l], sizes[l + 1], rng);
  }
  int inputs() const { return layers.front().in; }

  /// Outputs for `batch` rows of x (batch x inputs), keeping the activations for backward().
  const std::vector<float>& forward(const std::vector<float>& x, int batch) {
    acts_.assign(1, x);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      Layer<P>& L = layers[l];
      L.widen_weights();
      const std::vector<float>& a = acts_.back();
      std::vector<float> z(static_cast<std::size_t>(batch) * L.out);
      for (int s = 0; s < batch; ++s) {
        float* zs = &z[s * L.out];
        for (int o = 0; o < L.out; ++o) zs[o] = widen(L.b[o]);
        for (int i = 0; i < L.in; ++i) {
          const float ai = a[s * L.in + i];
          for (int o = 0; o < L.out; ++o) zs[o] += L.wt[i * L.out + o] * ai;
        }
      }
      if (l + 1 < layers.size())
        for (auto& v : z) v = std::tanh(v);
      acts_.push_back(std::move(z));
    }
    return acts_.back();
  }

  /// Mean squared error of the last forward() against y; fills every layer's grads.
  double backward(const std::vector<float>& y, int batch) {
    const std::vector<float>& out = acts_.back();
    const std::size_t n = out.size();  // batch x outputs
    std::vector<float> delta(n);       // dLoss/dOutput
    double loss = 0.0;
    for (std::size_t k = 0; k < n; ++k) {
      const float d = out[k] - y[k];
      loss += static_cast<double>(d) * d;
      delta[k] = 2.0f * d / static_cast<float>(n);
    }
    for (std::size_t l = layers.size(); l-- > 0;) {
      Layer<P>& L = layers[l];
      const std::vector<float>& a = acts_[l];  // this layer's input
      std::fill(L.dw.begin(), L.dw.end(), 0.0f);
      std::fill(L.db.begin(), L.db.end(), 0.0f);
      std::vector<float> prev(l > 0 ? static_cast<std::size_t>(batch) * L.in : 0);
      for (int s = 0; s < batch; ++s)
        for (int o = 0; o < L.out; ++o) {
          const float d = delta[s * L.out + o];
          L.db[o] += d;
          for (int i = 0; i < L.in; ++i) L.dw[o * L.in + i] += d * a[s * L.in + i];
          if (l > 0)
            for (int i = 0; i < L.in; ++i) prev[s * L.in + i] += d * L.wf[o * L.in + i];
        }
      for (std::size_t k = 0; k < prev.size(); ++k) prev[k] *= 1.0f - a[k] * a[k];  // tanh'
      delta = std::move(prev);
    }
    return loss / static_cast<double>(n);
  }

  std::vector<Layer<P>> layers;

 private:
  std::vector<std::vector<float>> acts_;  // the input, then each layer's output
};

}  // namespace kopt_convergence
