#pragma once
// The independent ceiling of every row: the AdamW step (and the norm pass) as a user writes it
// in plain C++ with OpenMP (static schedule), without Kokkos and without kopt's headers, built
// with -O3 -fno-math-errno and -march=native when the kernels are. kopt is measured against
// this loop, not only against ceilings it wrote itself (perf/ceiling.hpp), which share
// whatever costs kopt's own kernels pay. Its own state arrays, first touched by the threads
// that use them; the grads are shared with kopt (read only).
#include <cstdint>
#include <memory>

namespace kopt_perf::plain {

/// torch.optim.AdamW's defaults.
struct Hyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

/// Element types of a plain loop: float, or the bits of a bfloat16 / IEEE half.
enum class Elem { f32, bf16, f16 };

/// One plain AdamW over n elements: params (a copy of its own), fp32 master for 16-bit params,
/// m, v and (amsgrad) the running max, all allocated here.
class AdamW {
 public:
  /// On `threads` OpenMP threads (the kopt space's concurrency: 1 beside Serial).
  AdamW(Elem param, Elem grad, bool amsgrad, std::int64_t n, int threads, const Hyper& hyper = {});
  ~AdamW();
  /// One step over every element (torch's math: decoupled decay, both bias corrections),
  /// the grads multiplied by `grad_scale` (a clip factor; 1 for a plain step).
  void step(const void* grad, float grad_scale = 1.0f);

 private:
  struct Arrays;
  std::unique_ptr<Arrays> a_;
  Elem param_, grad_;
  bool amsgrad_;
  std::int64_t n_, t_ = 0;
  int threads_;
  Hyper h_;
};

/// The sum of squares of n grads, in double (what a user writes for a global norm).
double sum_of_squares(const void* grad, Elem type, std::int64_t n, int threads);

}  // namespace kopt_perf::plain
