#pragma once
/// \file
/// kopt::DType, without Kokkos (the checkpoint format and its fuzz target use it alone).

#include <cstddef>
#include <cstdint>

namespace kopt {

/// Element type of a tensor. kopt updates f32, bf16 and f16 params and grads; the other
/// kinds exist so a training code can describe what it has and get a clear refusal.
enum class DType : std::uint8_t { f32, bf16, f16, f64, i32 };

/// Bytes per element of `dtype`.
std::size_t size_of(DType dtype);
/// "f32", "bf16", ...
const char* name_of(DType dtype);

}  // namespace kopt
