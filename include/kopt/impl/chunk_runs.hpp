#pragma once
/// \file
/// Runs of params that continue each other: params cut one after another from one buffer
/// (as frameworks keep them: flat param and grad buffers), their grads likewise and their
/// state laid out in the same order, are updated as one span from the first one's slot, in
/// chunks of a full chunk_size instead of a short chunk each. 100,000 params of 64 elements
/// are then about 800 chunks, not 100,000: the kernel's work per chunk (its slot, its step
/// scalars, a call of its loop) is paid per 8,192 elements again.

#include <atomic>
#include <cstdint>
#include <kopt/dtype.hpp>
#include <kopt/impl/chunk_table.hpp>
#include <kopt/impl/q8_layout.hpp>
#include <vector>

namespace kopt::Impl {

/// What a slot's arrays hold, for slot_continues: the param's and grad's dtypes and each
/// state array's (only where the slot points to one).
struct SlotDTypes {
  DType param, grad;
  DType state[max_state_arrays];
};

/// Bytes from element 0 to element n of an array of `dtype`; -1 where element n does not
/// start a q8 block (a block's 256 codes are followed by its scale).
inline std::int64_t span_bytes(DType dtype, std::int64_t n) {
  if (dtype == DType::q8) return n % q8_block == 0 ? n / q8_block * q8_block_bytes : -1;
  return n * static_cast<std::int64_t>(size_of(dtype));
}

/// Whether `b` is `bytes` past `a` (both null: an array neither slot has).
inline bool continues_at(const void* a, const void* b, std::int64_t bytes) {
  if (a == nullptr || b == nullptr) return a == b;
  return bytes >= 0 && static_cast<const unsigned char*>(a) + bytes == b;
}

/// Whether slot `b` starts where slot `a`, of `n` elements, ends in every array either
/// points into, with the same row of step scalars and no rounding keyed by the param (a
/// stochastic stream is per param): one run from a's slot then updates both, bitwise as
/// each on its own. Policies that update per param (their rates, stages or row factors come
/// from the chunk's slot) never join runs (reads_param_values).
inline bool slot_continues(const UpdateSlot& a, std::int64_t n, const UpdateSlot& b,
                           const SlotDTypes& d) {
  if (a.scalar_set != b.scalar_set || a.rounding_stream != 0 || b.rounding_stream != 0 ||
      a.grad_dtype != b.grad_dtype || a.cols != b.cols)
    return false;
  bool same = continues_at(a.param, b.param, span_bytes(d.param, n)) &&
              continues_at(a.grad, b.grad, span_bytes(d.grad, n)) &&
              continues_at(a.master, b.master, span_bytes(DType::f32, n)) &&
              continues_at(a.remainder, b.remainder, 2 * n);
  for (std::size_t k = 0; k < max_state_arrays; ++k)
    same = same && continues_at(a.state[k], b.state[k], span_bytes(d.state[k], n));
  return same;
}

/// Appends the chunks of the slots in `order` (each of numel(slot) elements), a run of
/// slots that continue each other (`continues(prev, prev_numel, next)`) chunked as one span
/// of its first slot.
template <class Numel, class Continues>
void append_runs(std::vector<Chunk>& chunks, const std::vector<std::size_t>& order,
                 const Numel& numel, const Continues& continues, std::int64_t chunk) {
  std::size_t first = 0, last = 0;
  std::int64_t length = -1;  // the open run's; none yet
  for (const std::size_t i : order) {
    if (length >= 0 && continues(last, numel(last), i)) {
      length += numel(i);
    } else {
      if (length >= 0) append_chunks(chunks, first, length, chunk);
      first = i;
      length = numel(i);
    }
    last = i;
  }
  if (length >= 0) append_chunks(chunks, first, length, chunk);
}

/// Chunks launched by update kernels since the program started (a test's hook: runs that
/// joined show as fewer chunks).
inline std::atomic<std::uint64_t>& launched_update_chunks() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}

}  // namespace kopt::Impl
