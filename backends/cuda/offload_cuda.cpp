// The offload engine for params in CUDA memory: state and staging in pinned host memory,
// grads and params moved on two CUDA streams of kopt's own (copy_queue_cuda.cpp).
#include <kopt/impl/offload_engine_def.hpp>

namespace kopt::Impl {

std::unique_ptr<CopyQueue> make_cuda_copy_queue();

template class OffloadEngine<Kokkos::Cuda, Kokkos::CudaHostPinnedSpace, AdamPolicy>;

std::unique_ptr<Engine> make_cuda_offload_engine(std::size_t algorithm,
                                                 const OffloadOptions& options,
                                                 const std::string& label,
                                                 const StateStorage& storage) {
  return visit_policy(algorithm, [&](auto policy) -> std::unique_ptr<Engine> {
    return std::make_unique<
        OffloadEngine<Kokkos::Cuda, Kokkos::CudaHostPinnedSpace, decltype(policy)>>(
        Kokkos::Cuda(), make_cuda_copy_queue(), make_cuda_copy_queue(), options, label, storage);
  });
}

}  // namespace kopt::Impl
