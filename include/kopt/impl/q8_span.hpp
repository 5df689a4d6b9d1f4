#pragma once
/// \file
/// A span of a q8 state array brought to the host and back, for checkpoints (EngineState's
/// read and write): whole blocks are copied, decoded, and encoded again around the elements
/// written, so a span that starts or ends inside a block leaves the block's other elements
/// as they were.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/block_q8.hpp>
#include <vector>

namespace kopt::Impl {

/// The blocks of a q8 state array (Q8View: its bytes, in any memory space) covering elements
/// [offset, offset + count) of a param whose state starts at element `first` of a q8 array, copied
/// to the host to be decoded or re-encoded.
template <class Q8View>
struct Q8Span {
  using HostBytes =
      Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ConstHostBytes = Kokkos::View<const unsigned char*, Kokkos::HostSpace,
                                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  const Q8View& array;
  std::size_t begin, end;            ///< bytes of whole blocks in `array`
  std::int64_t offset, count, skip;  ///< skip: elements of the first block before offset
  bool root;
  std::vector<unsigned char> bytes;
  Q8Span(const Q8View& a, std::int64_t first, std::int64_t offset_, std::int64_t count_, bool r)
      : array(a), offset(offset_), count(count_), skip(offset_ % q8_block), root(r) {
    const std::int64_t from = (first + offset) / q8_block,
                       to = (first + offset + count + q8_block - 1) / q8_block;
    begin = static_cast<std::size_t>(from * q8_block_bytes);
    end = static_cast<std::size_t>(to * q8_block_bytes);
  }
  Q8Span& download() {
    bytes.resize(end - begin);
    if (array.extent(0) > 0)  // else the zeros an unallocated array starts from
      Kokkos::deep_copy(HostBytes(bytes.data(), bytes.size()),
                        Kokkos::subview(array, std::make_pair(begin, end)));
    return *this;
  }
  /// out[j] = element offset + j.
  void decode(float* out) const {
    float block[q8_block];
    for (std::size_t b = 0; b * q8_block_bytes < bytes.size(); ++b) {
      q8_decode_run(root, bytes.data() + b * q8_block_bytes, block, q8_block);
      for (int j = 0; j < q8_block; ++j) {
        const std::int64_t at = static_cast<std::int64_t>(b) * q8_block + j - skip;
        if (at >= 0 && at < count) out[at] = block[j];
      }
    }
  }
  /// Elements [offset, offset + count) = in[j], each block they touch encoded again (the
  /// rest of a block as it was, decoded; nothing past the param's `numel` elements).
  Q8Span& encode(const float* in, std::int64_t numel) {
    float block[q8_block];
    for (std::size_t b = 0; b * q8_block_bytes < bytes.size(); ++b) {
      unsigned char* at_block = bytes.data() + b * q8_block_bytes;
      q8_decode_run(root, at_block, block, q8_block);
      const std::int64_t first = offset - skip + static_cast<std::int64_t>(b) * q8_block;
      for (int j = 0; j < q8_block; ++j) {
        const std::int64_t at = first + j - offset;
        if (at >= 0 && at < count) block[j] = in[at];
      }
      const std::int64_t n = numel - first < q8_block ? numel - first : q8_block;
      q8_encode_run(root, block, at_block, static_cast<int>(n));
    }
    return *this;
  }
  template <class Exec>
  void upload(const Exec& exec) {
    Kokkos::deep_copy(exec, Kokkos::subview(array, std::make_pair(begin, end)),
                      ConstHostBytes(bytes.data(), bytes.size()));
    fence(exec, "kopt::EngineState::write_state");  // `bytes` dies after this
  }
};

}  // namespace kopt::Impl
