#pragma once
/// \file
/// ||p||^2 of one whole param, its value as the update reads it (its fp32 master, the
/// param joined with its remainder, or the param itself), for a tensor stage that needs it
/// (Adafactor's relative step size): blocks of factored_vector_block elements, a thread
/// each on the host (a thread per block and lane on devices, kopt/impl/item_lanes.hpp),
/// summed in lanes (lane_square_sum) with the stream asked for ahead, the blocks added in
/// order on the host. One read of the param at about a plain read's rate (1.0-1.2x on
/// a 2-core EPYC), the same bits on every thread count. (The tensor-sums measure pass, whose
/// exact block sums keep a param cut by ZeRO the same bits, took twice that; these params
/// are never cut.)

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/dtype.hpp>
#include <kopt/impl/factored_moments.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <kopt/impl/tensor_stage.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

namespace detail {

/// Element i of a stream of T, as fp32.
template <class T>
struct PlainValues {
  const T* x;
  KOKKOS_FORCEINLINE_FUNCTION float operator()(std::int64_t i) const { return to_float(x[i]); }
  KOKKOS_FORCEINLINE_FUNCTION const T* stream() const { return x; }
};

/// Element i of a bf16 param joined with its remainder: the exact fp32 master.
struct JoinedValues {
  const bfloat16* param;
  const std::uint16_t* remainder;
  KOKKOS_FORCEINLINE_FUNCTION float operator()(std::int64_t i) const {
    return join_master(param[i], remainder[i]);
  }
  KOKKOS_FORCEINLINE_FUNCTION const bfloat16* stream() const { return param; }
};

/// Block b of the values (item_square_sums): sums(b) = the sum of their squares.
template <class Values>
struct SquareBlocks {
  Values values;
  double* sums;
  std::int64_t numel;
  KOKKOS_FORCEINLINE_FUNCTION std::int64_t length(std::int64_t b) const {
    const std::int64_t begin = b * factored_vector_block;
    return numel - begin < factored_vector_block ? numel - begin : factored_vector_block;
  }
  KOKKOS_FORCEINLINE_FUNCTION float value(std::int64_t b, std::int64_t k) const {
    return values(b * factored_vector_block + k);
  }
  KOKKOS_FORCEINLINE_FUNCTION auto stream(std::int64_t b) const {
    return values.stream() + b * factored_vector_block;
  }
  KOKKOS_FORCEINLINE_FUNCTION void finish(std::int64_t b, double s) const { sums[b] = s; }
};

template <class ExecSpace, class Values>
std::int64_t square_sums_of(const Values& values, std::int64_t numel, std::int64_t at,
                            FactoredWork<ExecSpace>& work) {
  const std::int64_t blocks = factored_blocks(numel);
  item_square_sums<ExecSpace>("kopt::adafactor::param_norm", blocks,
                              SquareBlocks<Values>{values, work.sums.data() + at, numel},
                              work.lane_parts.data());
  return blocks;
}

}  // namespace detail

/// The sums of squares of the `numel` values of `p`, a block each, into work.sums(at..at +
/// n) (work reserved for a param of at least numel elements); returns n. Added in order
/// they give ||p||^2. Runs on ExecSpace's default instance, asynchronously; the caller
/// fences its own first and fetches the sums after (FactoredWork::fetch).
template <class ExecSpace>
std::int64_t whole_param_square_sums(const WorkingParam& p, std::int64_t numel, std::int64_t at,
                                     FactoredWork<ExecSpace>& work) {
  using detail::PlainValues;
  using detail::square_sums_of;
  if (numel == 0) return 0;
  if (p.master != nullptr) return square_sums_of(PlainValues<float>{p.master}, numel, at, work);
  switch (p.dtype) {
    case DType::bf16: {
      const auto* param = static_cast<const bfloat16*>(p.param);
      if (p.remainder != nullptr)
        return square_sums_of(detail::JoinedValues{param, p.remainder}, numel, at, work);
      return square_sums_of(PlainValues<bfloat16>{param}, numel, at, work);
    }
    case DType::f16:
      return square_sums_of(PlainValues<float16>{static_cast<const float16*>(p.param)}, numel, at,
                            work);
    default:
      return square_sums_of(PlainValues<float>{static_cast<const float*>(p.param)}, numel, at,
                            work);
  }
}

}  // namespace kopt::Impl
