// The fused engine compiled for Kokkos::OpenMP, for every algorithm. The math lives in
// include/kopt/; this file only instantiates it for the space.
#include <kopt/impl/fused_engine_def.hpp>

#define KOPT_INSTANTIATE_FUSED_OPTIMIZER(Space, Policy) \
  template class kopt::FusedOptimizer<Space, Policy>;
KOPT_FOR_EACH_POLICY(KOPT_INSTANTIATE_FUSED_OPTIMIZER, Kokkos::OpenMP)
#define KOPT_INSTANTIATE_LAUNCH_UPDATE(Space, Policy) KOPT_LAUNCH_UPDATE(, Space, Policy)
namespace kopt {
KOPT_FOR_EACH_POLICY(KOPT_INSTANTIATE_LAUNCH_UPDATE, Kokkos::OpenMP)
}
template std::unique_ptr<kopt::Impl::Engine> kopt::Impl::make_fused_engine<Kokkos::OpenMP>(
    const Kokkos::OpenMP&, std::size_t, const std::string&, const kopt::StateStorage&);
