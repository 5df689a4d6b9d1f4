// The one place that maps memory spaces to engines.
#include <kopt/error.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/runtime.hpp>

namespace kopt::Impl {

namespace {
// Host memory is served by the best host space this Kokkos has.
using HostExec = Kokkos::DefaultHostExecutionSpace;

std::string label_for(MemorySpace space, DType dtype) {
  return std::string("kopt::HybridOptimizer[") + name_of(space) + "," + name_of(dtype) + "]";
}
}  // namespace

const char* engine_space_for(MemorySpace space) {
  switch (space) {
    case MemorySpace::host:
    case MemorySpace::cuda_host_pinned:
      return HostExec::name();
    case MemorySpace::cuda:
    case MemorySpace::cuda_uvm:
#ifdef KOKKOS_ENABLE_CUDA
      return Kokkos::Cuda::name();
#else
      break;
#endif
  }
  KOPT_THROW_IF_AS(
      NotCompiled, true,
      "parameters in memory space '"
          << name_of(space)
          << "' need an execution space this build of Kokkos does not have (it has:" <<
          [] {
            std::string all;
            for (const auto& s : enabled_spaces()) all += " " + s;
            return all;
          }()
          << ")");
}

std::unique_ptr<Engine> make_engine(MemorySpace space, DType dtype) {
  const std::string where = engine_space_for(space);  // throws NotCompiled first
#ifdef KOKKOS_ENABLE_CUDA
  if (where == Kokkos::Cuda::name())
    return std::make_unique<EngineFor<Kokkos::Cuda>>(Kokkos::Cuda(), label_for(space, dtype));
#endif
  return std::make_unique<EngineFor<HostExec>>(HostExec(), label_for(space, dtype));
}

}  // namespace kopt::Impl
