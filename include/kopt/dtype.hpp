#pragma once
/// \file
/// kopt::DType, without Kokkos (the checkpoint format and its fuzz target use it alone).

#include <cstddef>
#include <cstdint>

namespace kopt {

/// Element type of a tensor. kopt updates f32, bf16 and f16 params and grads; f64 and i32
/// exist so a training code can describe what it has and get a clear refusal. q8 is a
/// state array's storage only (Adam's moments in blockwise 8-bit codes with a scale per 256
/// elements, kopt/impl/block_q8.hpp), never a tensor's.
enum class DType : std::uint8_t { f32, bf16, f16, f64, i32, q8 };

/// Bytes per element of `dtype` (q8: its code; each block of 256 adds a 4-byte scale).
std::size_t size_of(DType dtype);
/// "f32", "bf16", ...
const char* name_of(DType dtype);

}  // namespace kopt
