// A training loop in miniature: a model whose weights live in bf16 where the code keeps them
// (the default execution space's memory), gradients computed there in fp32, and kopt
// running AdamW on fp32 master copies in the same space. Fits w to a target by minimizing
// 0.5 * ||w - target||^2 and checks that the loss fell. Build with kopt_ENABLE_EXAMPLES=ON.
#include <cstdio>
#include <kopt/kopt.hpp>

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

// grad = w - target, and the loss, in one pass.
double gradient(const Kokkos::View<kopt::bfloat16*, Mem>& w,
                const Kokkos::View<float*, Mem>& target, const Kokkos::View<float*, Mem>& grad) {
  double loss = 0.0;
  Kokkos::parallel_reduce(
      "example::gradient", Kokkos::RangePolicy<Space>(0, w.extent(0)),
      KOKKOS_LAMBDA(const int i, double& sum) {
        const float d = w(i).to_float() - target(i);
        grad(i) = d;
        sum += 0.5 * d * d;
      },
      loss);
  return loss;
}

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  std::printf("%s\n", kopt::build_info().c_str());
  const int n = 1 << 16;
  Kokkos::View<kopt::bfloat16*, Mem> w("example::w", n);
  Kokkos::View<float*, Mem> target("example::target", n), grad("example::grad", n);
  Kokkos::parallel_for(
      "example::init", Kokkos::RangePolicy<Space>(0, n), KOKKOS_LAMBDA(const int i) {
        target(i) = 0.001f * static_cast<float>(i % 1000) - 0.5f;
        w(i) = kopt::bfloat16::from_float(0.0f);
      });

  // AdamW with a cosine-free linear decay of the learning rate, set between steps.
  kopt::FusedAdam<Space> opt(Space(), kopt::AdamConfig{.lr = 0.05, .weight_decay = 0.0});
  opt.add("w", kopt::Tensor(w), kopt::Tensor(grad));
  const double first = gradient(w, target, grad);
  double loss = first;
  for (int step = 1; step <= 300; ++step) {
    opt.config().lr = 0.05 * (1.0 - step / 400.0);
    opt.step();  // enqueued on the space; the next kernel on it sees the update
    loss = gradient(w, target, grad);
    if (step % 50 == 0) std::printf("step %3d  loss %.6g\n", step, loss);
  }
  const bool ok = loss < first * 1e-3;
  std::printf("loss %.6g -> %.6g: %s\n", first, loss, ok ? "fitted" : "NOT fitted");
  return ok ? 0 : 1;
}
