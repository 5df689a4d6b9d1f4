// The fused engine compiled for Kokkos::Cuda, for every algorithm. The math lives in
// include/kopt/; this file only instantiates it for the space.
#include <kopt/impl/fused_engine_def.hpp>

template class kopt::FusedOptimizer<Kokkos::Cuda, kopt::Impl::AdamPolicy>;
template std::unique_ptr<kopt::Impl::Engine> kopt::Impl::make_fused_engine<Kokkos::Cuda>(
    const Kokkos::Cuda&, std::size_t, const std::string&, const kopt::StateStorage&);
