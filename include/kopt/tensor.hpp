#pragma once
/// \file
/// kopt::Tensor: a non-owning handle on memory the training code owns.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/dtype.hpp>
#include <kopt/storage_types.hpp>
#include <string>
#include <type_traits>

namespace kopt {

/// Where a tensor's memory lives. `cuda_host_pinned` and `cuda_uvm` are reachable from
/// host and device; `cuda` only from the device.
enum class MemorySpace : std::uint8_t { host, cuda, cuda_uvm, cuda_host_pinned };

/// "host", "cuda", ...
const char* name_of(MemorySpace space);

/// The DType of a C++ element type (float, kopt::bfloat16, kopt::float16, double, int32).
template <class T>
constexpr DType dtype_of() {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<U, bfloat16>)
    return DType::bf16;
  else if constexpr (std::is_same_v<U, float16>)
    return DType::f16;
  else if constexpr (std::is_same_v<U, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return DType::i32;
  else
    static_assert(!sizeof(U), "kopt::dtype_of: element type has no kopt::DType");
}

/// The MemorySpace of a Kokkos memory space type.
template <class KokkosSpace>
constexpr MemorySpace memory_space_of() {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<KokkosSpace, Kokkos::CudaSpace>)
    return MemorySpace::cuda;
  else if constexpr (std::is_same_v<KokkosSpace, Kokkos::CudaUVMSpace>)
    return MemorySpace::cuda_uvm;
  else if constexpr (std::is_same_v<KokkosSpace, Kokkos::CudaHostPinnedSpace>)
    return MemorySpace::cuda_host_pinned;
  else
#endif
      if constexpr (std::is_same_v<KokkosSpace, Kokkos::HostSpace>)
    return MemorySpace::host;
  else
    static_assert(!sizeof(KokkosSpace), "kopt::memory_space_of: unsupported memory space");
}

/// A non-owning view of `numel` contiguous elements of `dtype` at `data` in `space`.
/// kopt never frees, resizes or reallocates it; the training code keeps it alive while the
/// optimizer refers to it (replace it with the optimizer's rebind/set_grad calls).
/// A default-constructed Tensor is null: as a grad it means "no gradient this step". So does
/// any tensor with a null pointer, even one of no elements (an empty param's grad needs a
/// non-null pointer for the param's step count to advance).
///
/// A param may be the local part of a larger tensor that the training code shards itself
/// (FSDP/DTensor style): `t.shard_of(global_numel, offset)`. kopt then sizes state, masters
/// and norms to the local `numel` elements, keys them by the global offset, and never
/// touches (or gathers) the rest of the global tensor.
///
/// A param may carry a 2-D shape, `t.matrix(rows, cols)` (row-major, rows * cols == numel):
/// the algorithms that work on whole matrices (Muon) need it and refuse a param without one,
/// naming it; elementwise algorithms ignore it. A grad's shape is never read.
struct Tensor {
  void* data = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::f32;
  MemorySpace space = MemorySpace::host;
  std::int64_t global_numel = -1;  ///< -1: the whole tensor; else see shard_of
  std::int64_t global_offset = 0;  ///< where element 0 sits in the global tensor
  std::int64_t rows = -1;          ///< -1: no 2-D shape; else see matrix()
  std::int64_t cols = -1;

  Tensor() = default;
  /// From raw memory. Does not block, checks nothing (the optimizer checks on use).
  Tensor(void* data_, std::int64_t numel_, DType dtype_, MemorySpace space_ = MemorySpace::host)
      : data(data_), numel(numel_), dtype(dtype_), space(space_) {}
  /// From a typed pointer.
  template <class T>
  static Tensor from(T* ptr, std::int64_t numel_, MemorySpace space_ = MemorySpace::host) {
    return Tensor(const_cast<std::remove_const_t<T>*>(ptr), numel_, dtype_of<T>(), space_);
  }
  /// From a contiguous rank-1 Kokkos::View; the view must outlive the optimizer's use.
  template <class T, class... Props>
  explicit Tensor(const Kokkos::View<T*, Props...>& view)
      : Tensor(Tensor::from(view.data(), static_cast<std::int64_t>(view.span()),
                            memory_space_of<typename Kokkos::View<T*, Props...>::memory_space>())) {
    static_assert(
        !std::is_same_v<typename Kokkos::View<T*, Props...>::array_layout, Kokkos::LayoutStride>,
        "kopt::Tensor: the View must be contiguous");
  }

  /// From a contiguous row-major rank-2 Kokkos::View: a matrix of its extents.
  template <class T, class... Props>
  explicit Tensor(const Kokkos::View<T**, Props...>& view)
      : Tensor(Tensor::from(view.data(), static_cast<std::int64_t>(view.span()),
                            memory_space_of<typename Kokkos::View<T**, Props...>::memory_space>())
                   .matrix(static_cast<std::int64_t>(view.extent(0)),
                           static_cast<std::int64_t>(view.extent(1)))) {
    static_assert(
        std::is_same_v<typename Kokkos::View<T**, Props...>::array_layout, Kokkos::LayoutRight>,
        "kopt::Tensor: a matrix View must be LayoutRight (row-major)");
  }

  /// No memory behind it (a param without a gradient this step).
  bool is_null() const { return data == nullptr; }
  /// This tensor, marked as elements [offset, offset + numel) of a global tensor of
  /// `global_numel` elements (without a 2-D shape: give the global tensor's with matrix()
  /// after this). Throws kopt::InvalidArgument when that range does not fit.
  Tensor shard_of(std::int64_t global_numel_, std::int64_t offset) const;
  /// Whether this is the local part of a larger tensor (shard_of).
  bool is_shard() const { return global_numel >= 0; }
  /// Elements [offset, offset + count) of this tensor, as a tensor of their own (a shard
  /// view); keeps the global offset and drops a 2-D shape. Checks the range.
  Tensor slice(std::int64_t offset, std::int64_t count) const;
  /// This tensor as a rows x cols matrix, row-major (element (i, j) at i * cols + j). Throws
  /// kopt::InvalidArgument unless rows, cols >= 0 and rows * cols is its numel (of a shard:
  /// its global_numel; the local piece of a matrix is not a matrix of its own).
  Tensor matrix(std::int64_t rows_, std::int64_t cols_) const;
  /// Whether it carries a 2-D shape (matrix()).
  bool is_matrix() const { return rows >= 0; }
  /// Bytes spanned.
  std::size_t bytes() const { return static_cast<std::size_t>(numel) * size_of(dtype); }
};

/// "bf16[1000] @ host" (a matrix: "bf16[20x50] @ host") for messages.
std::string describe(const Tensor& t);

}  // namespace kopt
