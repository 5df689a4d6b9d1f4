// The one place that maps memory spaces to engines.
#include <algorithm>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/offload_engine.hpp>
#include <kopt/runtime.hpp>

namespace kopt::Impl {

namespace {
// Host memory is served by the best host space this Kokkos has.
using HostExec = Kokkos::DefaultHostExecutionSpace;

std::string label_for(MemorySpace space, DType dtype, const AlgorithmConfig& algorithm,
                      const char* kind = "") {
  return std::string("kopt::HybridOptimizer[") + name_of(space) + "," + name_of(dtype) + "," +
         algorithm_name(algorithm) + kind + "]";
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

std::string storage_form(const StateStorage& storage) {
  std::string form;
  if (storage.master != MasterStorage::f32)
    form += std::string(",master ") + name_of(storage.master);
  if (storage.rounding != Rounding::nearest)
    form += std::string(",") + name_of(storage.rounding) + " rounding";
  if (storage.state_rounding != Rounding::nearest)
    form += std::string(",") + name_of(storage.state_rounding) + " state rounding";
  if (storage.array_dtypes == decltype(storage.array_dtypes){}) {
    if (storage.arrays != DType::f32) form += std::string(",") + name_of(storage.arrays) + " state";
    return form;
  }
  form += ",state";
  for (std::size_t k = 0; k < max_state_arrays; ++k)
    form += std::string(k == 0 ? " " : "/") + name_of(storage.dtype_of(k));
  return form;
}

std::unique_ptr<Engine> make_engine(MemorySpace space, DType dtype,
                                    const AlgorithmConfig& algorithm, const StateStorage& storage) {
  const std::string where = engine_space_for(space);  // throws NotCompiled first
  const std::string label = label_for(space, dtype, algorithm, storage_form(storage).c_str());
#ifdef KOKKOS_ENABLE_CUDA
  if (where == Kokkos::Cuda::name())
    return make_fused_engine(Kokkos::Cuda(), algorithm.index(), label, storage);
#endif
  return make_fused_engine(HostExec(), algorithm.index(), label, storage);
}

// src/offload_host.cpp
std::unique_ptr<Engine> make_host_offload_engine(std::size_t algorithm,
                                                 const OffloadOptions& options,
                                                 const std::string& label,
                                                 const StateStorage& storage);
#ifdef KOKKOS_ENABLE_CUDA
// backends/cuda/offload_cuda.cpp
std::unique_ptr<Engine> make_cuda_offload_engine(std::size_t algorithm,
                                                 const OffloadOptions& options,
                                                 const std::string& label,
                                                 const StateStorage& storage);
#endif

std::unique_ptr<Engine> make_offload_engine(MemorySpace space, DType dtype,
                                            const AlgorithmConfig& algorithm,
                                            const OffloadOptions& options,
                                            const StateStorage& storage) {
  const std::string where = engine_space_for(space);  // throws NotCompiled first
  const std::string form = ",offload" + storage_form(storage);
  const std::string label = label_for(space, dtype, algorithm, form.c_str());
#ifdef KOKKOS_ENABLE_CUDA
  if (where == Kokkos::Cuda::name())
    return make_cuda_offload_engine(algorithm.index(), options, label, storage);
#endif
  return make_host_offload_engine(algorithm.index(), options, label, storage);
}

void copy_bytes(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space,
                std::size_t bytes) {
  if (bytes == 0) return;
  const auto host_reachable = [](MemorySpace s) { return s != MemorySpace::cuda; };
  if (host_reachable(dst_space) && host_reachable(src_space)) {
    if (src_space == MemorySpace::cuda_uvm || dst_space == MemorySpace::cuda_uvm)
      fence_all("kopt::copy_bytes");  // device work may still be writing UVM pages
    std::memmove(dst, src, bytes);
    return;
  }
#ifdef KOKKOS_ENABLE_CUDA
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using Host = Kokkos::View<unsigned char*, Kokkos::HostSpace, Unmanaged>;
  using Device = Kokkos::View<unsigned char*, Kokkos::CudaSpace, Unmanaged>;
  auto* s = static_cast<unsigned char*>(const_cast<void*>(src));
  auto* d = static_cast<unsigned char*>(dst);
  if (dst_space == MemorySpace::cuda && src_space == MemorySpace::cuda)
    Kokkos::deep_copy(Device(d, bytes), Device(s, bytes));
  else if (dst_space == MemorySpace::cuda)
    Kokkos::deep_copy(Device(d, bytes), Host(s, bytes));
  else
    Kokkos::deep_copy(Host(d, bytes), Device(s, bytes));
#else
  KOPT_THROW_IF_AS(NotCompiled, true,
                   "kopt::copy_bytes: memory space 'cuda' in a build without CUDA");
#endif
}

std::shared_ptr<void> allocate_bytes(MemorySpace space, std::size_t bytes,
                                     const std::string& label) {
  const std::size_t n = std::max<std::size_t>(bytes, 1);
#ifdef KOKKOS_ENABLE_CUDA
  if (space == MemorySpace::cuda)
    return std::shared_ptr<void>(Kokkos::kokkos_malloc<Kokkos::CudaSpace>(label, n),
                                 [](void* p) { Kokkos::kokkos_free<Kokkos::CudaSpace>(p); });
  if (space == MemorySpace::cuda_uvm)
    return std::shared_ptr<void>(Kokkos::kokkos_malloc<Kokkos::CudaUVMSpace>(label, n),
                                 [](void* p) { Kokkos::kokkos_free<Kokkos::CudaUVMSpace>(p); });
  if (space == MemorySpace::cuda_host_pinned)
    return std::shared_ptr<void>(
        Kokkos::kokkos_malloc<Kokkos::CudaHostPinnedSpace>(label, n),
        [](void* p) { Kokkos::kokkos_free<Kokkos::CudaHostPinnedSpace>(p); });
#endif
  KOPT_THROW_IF_AS(NotCompiled, space != MemorySpace::host,
                   "kopt::allocate_bytes: memory space '" << name_of(space) << "' in this build");
  return std::shared_ptr<void>(Kokkos::kokkos_malloc<Kokkos::HostSpace>(label, n),
                               [](void* p) { Kokkos::kokkos_free<Kokkos::HostSpace>(p); });
}

}  // namespace kopt::Impl
