// ZeRO-Offload in one process: a large bf16 embedding in the default execution space's
// memory (the GPU on a CUDA build) keeps its moments and fp32 masters in host memory and is
// updated there, chunk by chunk, while a small layer keeps its state beside its params.
// Prints where the state lives and checks the fit.
#include <cstdio>
#include <kopt/kopt.hpp>

using Device = Kokkos::DefaultExecutionSpace;

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  bool ok = false;
  {
    const int n = 1 << 16, m = 64;
    Kokkos::View<kopt::bfloat16*, Device::memory_space> emb("example::emb", n);
    Kokkos::View<float*, Device::memory_space> demb("example::demb", n), w("example::w", m),
        dw("example::dw", m);
    kopt::ParamGroup big(kopt::AdamConfig{.lr = 0.02, .weight_decay = 0.0},
                         kopt::StatePlacement::host);
    big.add("embedding", kopt::Tensor(emb), kopt::Tensor(demb));
    kopt::ParamGroup small(kopt::AdamConfig{.lr = 0.02, .weight_decay = 0.0});
    small.add("layer.weight", kopt::Tensor(w), kopt::Tensor(dw));
    kopt::HybridOptimizer opt({big, small},
                              {.max_grad_norm = 100.0, .offload = {.chunk_elements = 1 << 14}});
    double loss = 0, first = -1;
    for (int step = 1; step <= 100; ++step) {
      // 0.5 * ||emb - 0.5||^2 + 0.5 * ||w + 1||^2
      double le = 0, lw = 0;
      Kokkos::parallel_reduce(
          "example::grad_emb", Kokkos::RangePolicy<Device>(0, n),
          KOKKOS_LAMBDA(const int i, double& s) {
            const float d = emb(i).to_float() - 0.5f;
            demb(i) = d;
            s += 0.5 * d * d;
          },
          le);
      Kokkos::parallel_reduce(
          "example::grad_w", Kokkos::RangePolicy<Device>(0, m),
          KOKKOS_LAMBDA(const int i, double& s) {
            const float d = w(i) + 1.0f;
            dw(i) = d;
            s += 0.5 * d * d;
          },
          lw);
      loss = le + lw;
      if (first < 0) first = loss;
      opt.step();
    }
    std::printf("embedding offloaded: %s, layer.weight offloaded: %s\n",
                opt.is_offloaded("embedding") ? "yes" : "no",
                opt.is_offloaded("layer.weight") ? "yes" : "no");
    for (const auto& [space, bytes] : opt.state_bytes())
      std::printf("optimizer state in %s memory: %zu bytes\n", space.c_str(), bytes);
    ok = opt.is_offloaded("embedding") && !opt.is_offloaded("layer.weight") && loss < 1e-2 * first;
    std::printf("loss %.4g -> %.4g: %s\n", first, loss, ok ? "fitted" : "NOT fitted");
  }
  return ok ? 0 : 1;
}
