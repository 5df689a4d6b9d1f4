// Steps one bf16 parameter with kopt and checks that it moved against its gradient.
#include <cstdio>
#include <kopt/kopt.hpp>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  int status = 0;
  {
    using Space = Kokkos::DefaultHostExecutionSpace;
    Kokkos::View<kopt::bfloat16*, Space::memory_space> w("w", 4);
    Kokkos::View<float*, Space::memory_space> g("g", 4);
    Kokkos::deep_copy(w, kopt::bfloat16::from_float(1.0f));
    Kokkos::deep_copy(g, 1.0f);
    kopt::FusedAdam<Space> opt(Space(), kopt::AdamConfig{.lr = 0.1});
    opt.add("w", kopt::Tensor(w), kopt::Tensor(g));
    opt.step();
    Space().fence();
    const float after = w(0).to_float();
    std::printf("%s: w 1 -> %g after one AdamW step\n", kopt::build_info().c_str(), after);
    status = after < 0.95f ? 0 : 1;
  }
  return status;
}
