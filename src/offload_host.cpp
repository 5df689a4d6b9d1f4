// The offload engine for params in host memory: its "device" is the host, its copy queues
// are worker threads. Host-only builds run and test the whole pipeline through it.
#include <kopt/impl/offload_engine_def.hpp>

namespace kopt::Impl {

// Adam's explicitly (the perf suite reaches it by type); the others as make_host_offload_engine
// needs them.
template class OffloadEngine<Kokkos::DefaultHostExecutionSpace, Kokkos::HostSpace, AdamPolicy>;

std::unique_ptr<Engine> make_host_offload_engine(std::size_t algorithm,
                                                 const OffloadOptions& options,
                                                 const std::string& label,
                                                 const StateStorage& storage) {
  using HostExec = Kokkos::DefaultHostExecutionSpace;
  std::shared_ptr<CopyQueue> to_host = make_host_copy_queue(CopyDirection::to_host);
  std::shared_ptr<CopyQueue> to_device = host_copy_workers() == HostCopyWorkers::shared
                                             ? to_host
                                             : make_host_copy_queue(CopyDirection::to_device);
  return visit_policy(algorithm, [&](auto policy) -> std::unique_ptr<Engine> {
    return std::make_unique<OffloadEngine<HostExec, Kokkos::HostSpace, decltype(policy)>>(
        HostExec(), std::move(to_host), std::move(to_device), options, label, storage);
  });
}

}  // namespace kopt::Impl
