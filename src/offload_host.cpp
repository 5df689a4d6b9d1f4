// The offload engine for params in host memory: its "device" is the host, its copy queues
// are worker threads. Host-only builds run and test the whole pipeline through it.
#include <kopt/impl/offload_engine_def.hpp>

namespace kopt::Impl {

template class OffloadEngine<Kokkos::DefaultHostExecutionSpace, Kokkos::HostSpace>;

std::unique_ptr<Engine> make_host_offload_engine(const OffloadOptions& options,
                                                 const std::string& label) {
  using HostExec = Kokkos::DefaultHostExecutionSpace;
  return std::make_unique<OffloadEngine<HostExec, Kokkos::HostSpace>>(
      HostExec(), make_host_copy_queue(), make_host_copy_queue(), options, label);
}

}  // namespace kopt::Impl
