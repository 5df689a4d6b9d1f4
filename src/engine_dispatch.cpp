// The one place that maps memory spaces to engines.
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/offload_engine.hpp>
#include <kopt/runtime.hpp>

namespace kopt::Impl {

namespace {
// Host memory is served by the best host space this Kokkos has.
using HostExec = Kokkos::DefaultHostExecutionSpace;

std::string label_for(MemorySpace space, DType dtype, const char* kind = "") {
  return std::string("kopt::HybridOptimizer[") + name_of(space) + "," + name_of(dtype) + kind +
         "]";
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

// src/offload_host.cpp
std::unique_ptr<Engine> make_host_offload_engine(const OffloadOptions& options,
                                                 const std::string& label);
#ifdef KOKKOS_ENABLE_CUDA
// backends/cuda/offload_cuda.cpp
std::unique_ptr<Engine> make_cuda_offload_engine(const OffloadOptions& options,
                                                 const std::string& label);
#endif

std::unique_ptr<Engine> make_offload_engine(MemorySpace space, DType dtype,
                                            const OffloadOptions& options) {
  const std::string where = engine_space_for(space);  // throws NotCompiled first
  const std::string label = label_for(space, dtype, ",offload");
#ifdef KOKKOS_ENABLE_CUDA
  if (where == Kokkos::Cuda::name()) return make_cuda_offload_engine(options, label);
#endif
  return make_host_offload_engine(options, label);
}

}  // namespace kopt::Impl
