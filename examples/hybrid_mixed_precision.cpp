// The HybridOptimizer as a mixed-precision training loop holds it: bf16 weights in the
// default execution space's memory (the GPU on a CUDA build), an fp32 bias in host memory,
// two groups with their own configs, gradient clipping and dynamic loss scaling. One
// backward pass overflows on purpose: that step is skipped everywhere and the scale backs off.
// Minimizes 0.5 * ||w - target||^2 + 0.5 * ||b - 1||^2 and checks that the loss fell.
#include <cmath>
#include <cstdio>
#include <kopt/kopt.hpp>

using Device = Kokkos::DefaultExecutionSpace;

// Scaled grads (loss_scale * dL/dw) and the unscaled loss; `overflow` plants an Inf.
double backward(const Kokkos::View<kopt::bfloat16*, Device::memory_space>& w,
                const Kokkos::View<float*, Device::memory_space>& dw,
                const Kokkos::View<float*, Kokkos::HostSpace>& b,
                const Kokkos::View<float*, Kokkos::HostSpace>& db, float loss_scale,
                bool overflow) {
  double loss = 0.0;
  Kokkos::parallel_reduce(
      "example::backward_w", Kokkos::RangePolicy<Device>(0, w.extent(0)),
      KOKKOS_LAMBDA(const int i, double& sum) {
        const float target = 0.25f * static_cast<float>(i % 8) - 1.0f;
        const float d = w(i).to_float() - target;
        dw(i) = (overflow && i == 0) ? INFINITY : loss_scale * d;
        sum += 0.5 * d * d;
      },
      loss);
  for (std::size_t i = 0; i < b.extent(0); ++i) {
    db(i) = loss_scale * (b(i) - 1.0f);
    loss += 0.5 * (b(i) - 1.0) * (b(i) - 1.0);
  }
  return loss;
}

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  std::printf("%s\n", kopt::build_info().c_str());
  bool ok = true;
  {
    Kokkos::View<kopt::bfloat16*, Device::memory_space> w("example::w", 4096);
    Kokkos::View<float*, Device::memory_space> dw("example::dw", 4096);
    Kokkos::View<float*, Kokkos::HostSpace> b("example::b", 16), db("example::db", 16);

    kopt::ParamGroup weights(kopt::AdamConfig{.lr = 0.05, .weight_decay = 0.0});
    weights.add("layer.weight", kopt::Tensor(w), kopt::Tensor(dw));
    kopt::ParamGroup biases(kopt::AdamConfig{.lr = 0.1, .weight_decay = 0.0});
    biases.add("layer.bias", kopt::Tensor(b), kopt::Tensor(db));
    kopt::HybridOptimizer opt(
        {weights, biases},
        {.max_grad_norm = 10.0, .loss_scaling = kopt::LossScalerOptions{.growth_interval = 50}});

    double first = -1, loss = 0;
    int skipped = 0;
    for (int step = 1; step <= 200; ++step) {
      loss = backward(w, dw, b, db, static_cast<float>(opt.loss_scale()), step == 20);
      if (first < 0) first = loss;
      const kopt::StepStats st = opt.step();
      skipped += st.skipped;
      if (step % 40 == 0 || st.skipped)
        std::printf("step %3d  loss %.5g  grad norm %.4g  clip %.3g  scale %g%s\n", step, loss,
                    st.grad_norm, st.clip_factor, st.loss_scale, st.skipped ? "  (skipped)" : "");
    }
    ok = loss < 1e-2 * first && skipped == 1 && opt.step_count("layer.weight") == 199;
    std::printf("loss %.5g -> %.5g, %d step skipped: %s\n", first, loss, skipped,
                ok ? "fitted" : "NOT fitted");
  }
  return ok ? 0 : 1;
}
