// The naive baseline: what a user writes first. One loop, one thread, torch's AdamW math
// (decoupled weight decay, bias corrections) in float, std::sqrt with errno left on.
#include <cmath>
#include <vector>

#include "peers.hpp"

namespace kopt_perf {
namespace {

class NaivePeer final : public Peer {
 public:
  NaivePeer(float* param, const float* grad, std::int64_t n, const kopt::AdamConfig& config)
      : param_(param), grad_(grad), n_(n), config_(config), m_(n), v_(n) {}

  void step() override {
    ++step_;
    const float lr = static_cast<float>(config_.lr);
    const float beta1 = static_cast<float>(config_.beta1);
    const float beta2 = static_cast<float>(config_.beta2);
    const float eps = static_cast<float>(config_.eps);
    const float decay = 1.0f - lr * static_cast<float>(config_.weight_decay);
    const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(step_));
    const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(step_));
    for (std::int64_t i = 0; i < n_; ++i) {
      const float g = grad_[i];
      param_[i] *= decay;
      m_[i] = beta1 * m_[i] + (1.0f - beta1) * g;
      v_[i] = beta2 * v_[i] + (1.0f - beta2) * g * g;
      const float denom = std::sqrt(v_[i]) / std::sqrt(bc2) + eps;
      param_[i] -= lr / bc1 * m_[i] / denom;
    }
  }

 private:
  float* param_;
  const float* grad_;
  std::int64_t n_;
  kopt::AdamConfig config_;
  std::vector<float> m_, v_;
  std::int64_t step_ = 0;
};

}  // namespace

std::unique_ptr<Peer> make_naive_peer(float* param, const float* grad, std::int64_t n,
                                      const kopt::AdamConfig& config) {
  return std::make_unique<NaivePeer>(param, grad, n, config);
}

}  // namespace kopt_perf
