#pragma once
// The convergence harness (issue 18): the MLP of convergence_mlp.hpp regresses a random
// teacher MLP on fresh Gaussian minibatches with AdamW (kopt::HybridOptimizer; weights and
// biases in separate groups, weight decay on weights only, linear warmup then cosine lr,
// clipping at 1, as a real training code does it), once per state storage option of
// convergence_options.hpp. Everything is seeded: a run gives the same curve bitwise each
// time, and every run starts from the same weights and sees the same minibatches. Used by
// tests/test_convergence.cpp and perf/convergence.cpp (kopt_convergence).

#include <cmath>
#include <kopt/kopt.hpp>
#include <string>
#include <variant>
#include <vector>

#include "convergence_mlp.hpp"
#include "convergence_options.hpp"

namespace kopt_convergence {

struct TrainConfig {
  int steps = 2000;
  int batch = 32;
  double lr = 3e-3;  ///< the peak, reached after `warmup` steps
  int warmup = 100;
  double final_lr = 3e-4;  ///< where the cosine ends, at `steps`
  double weight_decay = 0.01;
  int held_out = 1024;  ///< samples in the eval set
  std::uint64_t seed = 2026;
  std::vector<int> teacher = {16, 32, 1};
  std::vector<int> student = {16, 32, 32, 1};

  double lr_at(int step) const {
    if (step <= warmup) return lr * step / warmup;
    const double t = static_cast<double>(step - warmup) / (steps - warmup);
    return final_lr + 0.5 * (lr - final_lr) * (1.0 + std::cos(3.141592653589793 * t));
  }
};

inline double mse(const std::vector<float>& out, const std::vector<float>& y) {
  double sum = 0;
  for (std::size_t s = 0; s < y.size(); ++s) {
    const double d = static_cast<double>(out[s]) - y[s];
    sum += d * d;
  }
  return sum / static_cast<double>(y.size());
}

/// One training run in progress, stepped by the caller (the test steps two side by side).
/// Holds raw pointers into its model: neither copied nor moved.
template <class P>
class Training {
 public:
  Training(const StorageOption& option, const TrainConfig& config)
      : config_(config),
        init_(config.seed),
        data_(config.seed + 1),
        teacher_(config.teacher, init_),
        student_(config.student, init_),
        opt_(make_optimizer(option)) {}
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;

  /// A fresh minibatch, forward, backward, this step's lr, one optimizer step. Returns the
  /// minibatch's loss before the update.
  double step() {
    ++step_;
    sample(data_, config_.batch);
    student_.forward(x_, config_.batch);
    const double loss = student_.backward(y_, config_.batch);
    for (std::size_t g = 0; g < opt_.num_groups(); ++g) {
      if (std::holds_alternative<kopt::MuonConfig>(opt_.group(g).algorithm()))
        opt_.group(g).config<kopt::MuonConfig>().lr = config_.lr_at(step_);
      else
        opt_.group(g).config().lr = config_.lr_at(step_);
    }
    opt_.step();
    return loss;
  }
  /// The loss on a held-out set (the same set at every call and in every run).
  double eval_loss() {
    Rng held(config_.seed + 2);
    sample(held, config_.held_out);
    return mse(student_.forward(x_, config_.held_out), y_);
  }
  Mlp<P>& student() { return student_; }

 private:
  kopt::HybridOptimizer make_optimizer(const StorageOption& option) {
    const double lr = config_.lr_at(1);
    kopt::ParamGroup weights(kopt::AdamConfig{.lr = lr, .weight_decay = config_.weight_decay});
    kopt::ParamGroup biases(kopt::AdamConfig{.lr = lr, .weight_decay = 0});
    kopt::ParamGroup hidden(
        kopt::MuonConfig{.lr = lr, .weight_decay = config_.weight_decay, .match_rms_adamw = true});
    const bool muon = option.optimizer == Optimizer::muon;
    option.configure(weights);
    option.configure(biases);
    if (muon) option.configure(hidden);
    for (std::size_t l = 0; l < student_.layers.size(); ++l) {
      Layer<P>& L = student_.layers[l];
      const std::string name = "layer" + std::to_string(l);
      const kopt::Tensor w = kopt::Tensor::from(L.w.data(), L.w.size()).matrix(L.out, L.in);
      const bool head = l + 1 == student_.layers.size();
      (muon && !head ? hidden : weights)
          .add(name + ".weight", w, kopt::Tensor::from(L.dw.data(), L.dw.size()));
      biases.add(name + ".bias", kopt::Tensor::from(L.b.data(), L.b.size()),
                 kopt::Tensor::from(L.db.data(), L.db.size()));
    }
    if (muon) return kopt::HybridOptimizer({hidden, weights, biases}, {.max_grad_norm = 1.0});
    return kopt::HybridOptimizer({weights, biases}, {.max_grad_norm = 1.0});
  }
  /// `n` Gaussian inputs into x_ and the teacher's outputs for them into y_.
  void sample(Rng& rng, int n) {
    x_.resize(static_cast<std::size_t>(n) * teacher_.inputs());
    for (float& v : x_) v = rng.normal();
    y_ = teacher_.forward(x_, n);
  }

  TrainConfig config_;
  Rng init_, data_;
  Mlp<float> teacher_;
  Mlp<P> student_;
  kopt::HybridOptimizer opt_;
  std::vector<float> x_, y_;
  int step_ = 0;
};

struct Curve {
  std::vector<double> loss;  ///< each step's minibatch loss, before its update
  double eval_loss = 0;      ///< on the held-out set, after the last step
};

/// A whole run of `option`.
inline Curve train(const StorageOption& option, const TrainConfig& config = {}) {
  auto run = [&](auto& training) {
    Curve curve;
    for (int step = 1; step <= config.steps; ++step) curve.loss.push_back(training.step());
    curve.eval_loss = training.eval_loss();
    return curve;
  };
  if (option.params == kopt::DType::f32) {
    Training<float> training(option, config);
    return run(training);
  }
  Training<kopt::bfloat16> training(option, config);
  return run(training);
}

/// The mean of the last `n` steps' losses: the final training loss, the minibatch noise
/// averaged out.
inline double final_loss(const Curve& curve, std::size_t n = 100) {
  double sum = 0;
  for (std::size_t k = curve.loss.size() - n; k < curve.loss.size(); ++k) sum += curve.loss[k];
  return sum / static_cast<double>(n);
}

}  // namespace kopt_convergence
