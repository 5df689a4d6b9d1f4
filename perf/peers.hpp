#pragma once
// Peers the suite measures kopt against, on the same data: each runs torch's AdamW math over
// fp32 params in host memory, with state of its own.
#include <cstdint>
#include <kopt/adam_config.hpp>
#include <memory>
#include <string>

namespace kopt_perf {

class Peer {
 public:
  virtual ~Peer() = default;
  /// One AdamW step of every element, done when it returns.
  virtual void step() = 0;
};

/// The naive baseline: a plain scalar C++ loop on one thread, built with the project's usual
/// flags but not the kernels' (no -fno-math-errno, no -march=native), as a user would write it.
std::unique_ptr<Peer> make_naive_peer(float* param, const float* grad, std::int64_t n,
                                      const kopt::AdamConfig& config);

/// libtorch's torch::optim::AdamW over the same memory (wrapped, not copied), on `threads`
/// intra-op threads; nullptr when the suite was built without libtorch.
std::unique_ptr<Peer> make_libtorch_peer(float* param, float* grad, std::int64_t n,
                                         const kopt::AdamConfig& config, int threads);

/// The libtorch version the suite was built with, or why there is none.
std::string libtorch_info();

}  // namespace kopt_perf
