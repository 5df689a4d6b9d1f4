// The smallest training loop: linear regression y = X w + b on host memory with AdamW.
// Fits 8 weights and a bias to noiseless data and prints the loss falling.
#include <cmath>
#include <cstdio>
#include <kopt/kopt.hpp>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  constexpr int samples = 256, features = 8;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(samples * features), y(samples), true_w(features);
  for (float& v : true_w) v = normal(rng);
  for (int s = 0; s < samples; ++s) {
    y[s] = 0.5f;  // the true bias
    for (int f = 0; f < features; ++f) y[s] += (x[s * features + f] = normal(rng)) * true_w[f];
  }
  std::vector<float> w(features, 0.0f), dw(features), b(1, 0.0f), db(1);
  kopt::ParamGroup group(kopt::AdamConfig{.lr = 0.05, .weight_decay = 0.0});
  group.add("w", kopt::Tensor::from(w.data(), features), kopt::Tensor::from(dw.data(), features));
  group.add("b", kopt::Tensor::from(b.data(), 1), kopt::Tensor::from(db.data(), 1));
  kopt::HybridOptimizer opt({group});
  double loss = 0, first = -1;
  for (int step = 1; step <= 500; ++step) {
    // Mean squared error and its gradient.
    loss = 0;
    std::fill(dw.begin(), dw.end(), 0.0f);
    db[0] = 0;
    for (int s = 0; s < samples; ++s) {
      float pred = b[0];
      for (int f = 0; f < features; ++f) pred += x[s * features + f] * w[f];
      const float err = pred - y[s];
      loss += 0.5 * err * err / samples;
      for (int f = 0; f < features; ++f) dw[f] += err * x[s * features + f] / samples;
      db[0] += err / samples;
    }
    if (first < 0) first = loss;
    opt.step();
    if (step % 100 == 0) std::printf("step %3d  loss %.3e\n", step, loss);
  }
  const bool ok = loss < 1e-4 * first && std::abs(b[0] - 0.5f) < 1e-2f;
  std::printf("loss %.3e -> %.3e, bias %.4f (true 0.5): %s\n", first, loss, b[0],
              ok ? "fitted" : "NOT fitted");
  return ok ? 0 : 1;
}
