#pragma once
/// \file
/// kopt::OffloadOptions: which device params get their optimizer state in host memory, and
/// how the offload pipeline moves their grads and params.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kopt {

struct OffloadOptions {
  /// Besides every group with StatePlacement::host, offload this fraction (0..1) of the
  /// optimizer state of device params in StatePlacement::with_params groups, largest params
  /// first (see select_offloaded). Unset: only the host-placed groups.
  std::optional<double> fraction = std::nullopt;
  /// Or (and) offload the largest device params until the optimizer state left on the
  /// device fits in this many bytes.
  std::optional<std::size_t> device_state_budget = std::nullopt;
  /// Elements per pipeline chunk: one batch of device-to-host grad copies, one host update,
  /// one batch of host-to-device param copies. A chunk spans param boundaries; a param
  /// larger than a chunk spans several. Each staging buffer holds 8 bytes per element.
  std::int64_t chunk_elements = std::int64_t{1} << 20;
  /// Staging buffers (>= 2): chunk k copies into buffer k % staging_buffers, so chunk k+1's
  /// grads land while chunk k computes and chunk k-1's params are still on their way.
  int staging_buffers = 3;
  /// Copies of fewer bytes than this (a param, or its piece in a chunk) go as one batch per
  /// chunk and direction: on a GPU one kernel that copies them all between device and pinned
  /// memory, instead of one cudaMemcpyAsync each (a few microseconds of setup apiece, so
  /// 100,000 tiny params would cost as much as 100,000 transfers). Larger copies keep their own
  /// DMA transfer, the faster way to move many bytes. 0: every copy on its own.
  std::size_t batch_copies_below = std::size_t{64} << 10;

  /// Throws kopt::InvalidArgument naming the field when a value is out of range.
  void validate() const;
};

/// The documented offload rule. `state_bytes[i]` is the device optimizer state of candidate
/// i (a device param in a with_params group), in registration order. Candidates are taken
/// largest first (ties: the earlier one) until both hold: the bytes taken are at least
/// `fraction` of the total, and the bytes left are at most `device_state_budget` (an unset
/// option always holds). Returns, per candidate, whether it is offloaded.
std::vector<bool> select_offloaded(const std::vector<std::size_t>& state_bytes,
                                   const OffloadOptions& options);

}  // namespace kopt
