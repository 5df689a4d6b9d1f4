#pragma once
/// \file
/// The sizes of DType::q8 arrays (kopt/impl/block_q8.hpp has the codes), without Kokkos: the
/// checkpoint format, which the fuzz target builds alone, reads them too.

#include <cstdint>

namespace kopt::Impl {

/// Elements per q8 block.
inline constexpr int q8_block = 256;
/// Bytes per q8 block: its codes, then its float scale (4-byte aligned: 256 + 4).
inline constexpr std::int64_t q8_block_bytes = q8_block + 4;

/// Bytes of a q8 array of `n` elements, whole blocks (host code).
constexpr std::int64_t q8_bytes(std::int64_t n) {
  return (n + q8_block - 1) / q8_block * q8_block_bytes;
}

}  // namespace kopt::Impl
