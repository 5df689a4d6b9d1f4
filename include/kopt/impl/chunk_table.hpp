#pragma once
/// \file
/// What every chunk kernel reads: the slot table (one param's pointers and its row of step
/// scalars) and the chunk table (element ranges of slots), built on the host and uploaded.
/// A group's tensors are cut into chunks of at most chunk_size elements; one work item (a
/// host iteration, or a device team) updates one chunk.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/dtype.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/state_storage.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

/// One parameter's memory and this step's scalars, as the kernel sees them.
struct UpdateSlot {
  void* param = nullptr;               ///< ParamT*
  const void* grad = nullptr;          ///< GradT*
  float* master = nullptr;             ///< fp32 master of a 16-bit param, else null
  std::uint16_t* remainder = nullptr;  ///< or its remainder (MasterStorage::remainder)
  void* state[max_state_arrays] = {};  ///< the policy's arrays (float, bfloat16 or
                                       ///< float16: StateDTypes); null where not kept
  std::int32_t scalar_set = 0;         ///< row of the launch's step-scalar table
  std::uint64_t rounding_stream = 0;   ///< Rounding::stochastic: rounding_stream(seed, name)
  std::int64_t first_index = 0;        ///< element 0's index in the whole tensor
  DType grad_dtype = DType::f32;       ///< for the norm, which reads grads of every dtype at once
  std::int64_t cols = 0;  ///< a row-factored policy's row length (its apply slots only)
};

/// Elements [begin, end) of slot `slot`.
struct Chunk {
  std::int64_t begin;
  std::int64_t end;
  std::int32_t slot;
};

/// Elements per chunk: long enough to amortize the slot read and vectorize on the host,
/// short enough to balance threads and keep a device team's work small.
template <class ExecSpace>
inline constexpr std::int64_t chunk_size = runs_on_host<ExecSpace> ? 8192 : 4096;
/// Threads per team on devices.
inline constexpr int device_team_size = 256;

/// Appends the chunks covering `numel` elements of slot `slot`.
inline void append_chunks(std::vector<Chunk>& chunks, std::size_t slot, std::int64_t numel,
                          std::int64_t chunk) {
  for (std::int64_t b = 0; b < numel; b += chunk)
    chunks.push_back(Chunk{b, std::min(numel, b + chunk), static_cast<std::int32_t>(slot)});
}

/// A device copy of a host chunk list, labelled.
template <class ExecSpace>
Kokkos::View<Chunk*, typename ExecSpace::memory_space> upload_chunks(
    const ExecSpace& exec, const std::string& label, const std::vector<Chunk>& chunks) {
  allocation_point();
  Kokkos::View<Chunk*, typename ExecSpace::memory_space> dev(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, label), chunks.size());
  Kokkos::View<const Chunk*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      chunks.data(), chunks.size());
  Kokkos::deep_copy(exec, dev, host);
  // `chunks` is caller-owned and may die right after: make sure the copy has read it.
  fence(exec, "kopt::upload_chunks");
  return dev;
}

}  // namespace kopt::Impl
