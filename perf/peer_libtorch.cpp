// libtorch's torch::optim::AdamW as a peer (built only when CMake finds Torch). The params and
// grads are kopt's host arrays wrapped with from_blob, so both optimizers read the same data.
#include <torch/torch.h>
#include <torch/version.h>

#include "peers.hpp"

namespace kopt_perf {
namespace {

class LibtorchPeer final : public Peer {
 public:
  LibtorchPeer(float* param, float* grad, std::int64_t n, const kopt::AdamConfig& config,
               int threads) {
    at::set_num_threads(threads);
    param_ = torch::from_blob(param, {n}, torch::kFloat32);
    param_.mutable_grad() = torch::from_blob(grad, {n}, torch::kFloat32);
    auto options = torch::optim::AdamWOptions(config.lr)
                       .betas({config.beta1, config.beta2})
                       .eps(config.eps)
                       .weight_decay(config.weight_decay)
                       .amsgrad(config.amsgrad);
    optimizer_ = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{param_}, options);
  }

  void step() override {
    torch::NoGradGuard no_grad;
    optimizer_->step();
  }

 private:
  torch::Tensor param_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

}  // namespace

std::unique_ptr<Peer> make_libtorch_peer(float* param, float* grad, std::int64_t n,
                                         const kopt::AdamConfig& config, int threads) {
  return std::make_unique<LibtorchPeer>(param, grad, n, config, threads);
}

std::string libtorch_info() {
  return std::string("libtorch ") + TORCH_VERSION + " (" + std::to_string(at::get_num_threads()) +
         " intra-op threads by default)";
}

}  // namespace kopt_perf
