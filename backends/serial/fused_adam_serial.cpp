// The fused Adam engine compiled for Kokkos::Serial. The math lives in include/kopt/; this
// file only instantiates it for the space.
#include <kopt/impl/fused_adam_def.hpp>

template class kopt::FusedAdam<Kokkos::Serial>;
