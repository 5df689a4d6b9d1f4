// The fused engine compiled for Kokkos::OpenMP, for every algorithm. The math lives in
// include/kopt/; this file only instantiates it for the space.
#include <kopt/impl/fused_engine_def.hpp>

template class kopt::FusedOptimizer<Kokkos::OpenMP, kopt::Impl::AdamPolicy>;
template std::unique_ptr<kopt::Impl::Engine> kopt::Impl::make_fused_engine<Kokkos::OpenMP>(
    const Kokkos::OpenMP&, std::size_t, const std::string&, const kopt::StateStorage&);
