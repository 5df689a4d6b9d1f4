#pragma once
/// \file
/// kopt::StateStorage: how a group stores its optimizer state (the masters' form, the state
/// arrays' element type). Kokkos-free.

#include <array>
#include <cstddef>
#include <cstdint>
#include <kopt/dtype.hpp>
#include <optional>

namespace kopt {

/// How a group keeps the fp32 master of each 16-bit param (an f32 param is its own master).
enum class MasterStorage : std::uint8_t {
  /// An fp32 copy beside the param: 4 bytes per element. Any 16-bit dtype.
  f32,
  /// bf16 params only: the param's 16 bits and a 16-bit remainder hold the fp32 master
  /// exactly, 2 bytes per element. The masters, and so every update, are bitwise those of
  /// `f32`; the param is the master rounded to nearest with ties toward the truncated value
  /// (kopt/impl/param_remainder.hpp says why ties-to-even cannot be kept), which differs from
  /// `f32`'s param on one float in 131,072 by one bf16 ulp. The param is part of the master:
  /// weights written into it move the master with them (within one bf16 ulp of the new
  /// weights; exact when they are the weights saved with the optimizer's checkpoint).
  /// Offloaded (StatePlacement::host, or chosen by OffloadOptions), the remainders live on
  /// the host (2 B there instead of an fp32 master's 4) and each step copies the param to
  /// the host with its grad (2 B more per element towards the host).
  remainder,
  /// No master: the update runs from the 16-bit param widened and is rounded straight back
  /// into it (StateStorage::rounding), 0 bytes per element. Round to nearest loses every
  /// update smaller than half an ulp of the param (bf16: 2^-9 of its magnitude): sane when
  /// lr times the update stays well above that, e.g. short fine-tunes at large lr. Stochastic
  /// rounding (bf16 params) keeps such updates in expectation and is the choice for long
  /// runs with small lr. Offloaded, each step copies the param to the host with its grad.
  none,
};

/// "f32", "remainder" or "none".
const char* name_of(MasterStorage master);

/// How a group without masters (MasterStorage::none) rounds each update into its params
/// (StateStorage::rounding), and how a group rounds its bf16 and f16 state arrays
/// (StateStorage::state_rounding).
enum class Rounding : std::uint8_t {
  /// To nearest, ties to even: what an fp32 master's param would show.
  nearest,
  /// Up with probability (distance to the value below) / ulp, so the expected param is the
  /// fp32 result. bf16 params only. The random bits are a hash of (StateStorage::seed, the
  /// step count, the param's name, the element's index in the whole tensor): the same bits
  /// at any thread count, on every backend, at any world size and sharding. State arrays
  /// draw their own bits (the hash salted by the array's index), resolved to 16 bits.
  stochastic,
};

/// "nearest" or "stochastic".
const char* name_of(Rounding rounding);

/// The most state arrays an algorithm keeps per element (Adam with amsgrad: 3).
inline constexpr std::size_t max_state_arrays = 3;

/// How a group stores its optimizer state: the masters' form, and the element type of each
/// of its algorithm's state arrays (moments, momentum buffers, sums). The math runs in fp32
/// whatever they are; only storage narrows: each element is widened exactly, updated, and
/// rounded once per step (to nearest even, or stochastically: `state_rounding`).
///
/// Array element types: f32 (4 B), bf16 (2 B; fp32's range, 8 significant bits) and f16
/// (2 B; 11 significant bits, magnitudes 6e-8 to 65504: past 65504 an element becomes Inf,
/// below 6e-8 zero). Both suit a first moment (exp_avg, momentum buffers). A second moment
/// (Adam's exp_avg_sq) is best kept f32: rounded to nearest, a slow average loses each step's
/// change below half a unit of its form, so at beta2 = 0.999 a bf16 v settles at about a
/// quarter of the true v under steady grads (steps ~2x AdamW's), and an f16 v stays 0 where
/// (1 - beta2) g^2 is below 6e-8 (|grad| below ~5e-3; README, "What narrow storage does to
/// Adam's second moment"). Rounded stochastically (`state_rounding`), each store is right in
/// expectation and a 16- or 8-bit average follows the fp32 one, noisily, instead of stalling.
struct StateStorage {
  MasterStorage master = MasterStorage::f32;
  /// The element type of every state array without an entry in `array_dtypes`: DType::f32
  /// (default), bf16 or f16. Checkpoints store each array in its dtype; a file loads into
  /// a group of any storage, each value widened and rounded to nearest even into its dtype.
  DType arrays = DType::f32;
  /// MasterStorage::none only (else nearest): how updates are rounded into the params.
  Rounding rounding = Rounding::nearest;
  /// Rounding::stochastic only (in `rounding` or `state_rounding`; else 0): the seed of
  /// its random bits, one per group.
  std::uint64_t seed = 0;
  /// How each step's new state is rounded into its bf16, f16 and q8 arrays: to nearest
  /// (even; default), or stochastically (Rounding::stochastic: q8 codes too, each between
  /// its block's two neighbouring codes). f32 arrays are stored as computed. Any master form.
  Rounding state_rounding = Rounding::nearest;
  /// Per-array element types, by the algorithm's array index (AdamConfig::state_array_names:
  /// exp_avg, exp_avg_sq, max_exp_avg_sq; set by name with ParamGroup::set_state_dtype);
  /// an empty entry takes `arrays`. E.g. bf16 exp_avg with f32 exp_avg_sq.
  std::array<std::optional<DType>, max_state_arrays> array_dtypes{};
  bool operator==(const StateStorage&) const = default;

  /// The element type of array k.
  DType dtype_of(std::size_t k) const {
    return k < array_dtypes.size() ? array_dtypes[k].value_or(arrays) : arrays;
  }
  /// Whether every array is of `dtype`.
  bool all(DType dtype) const {
    for (std::size_t k = 0; k < max_state_arrays; ++k)
      if (dtype_of(k) != dtype) return false;
    return true;
  }
  /// Whether some array is of `dtype`.
  bool any(DType dtype) const {
    for (std::size_t k = 0; k < max_state_arrays; ++k)
      if (dtype_of(k) == dtype) return true;
    return false;
  }
  /// Whether every array is f32 (the default).
  bool wide() const { return all(DType::f32); }
  /// Whether some store rounds stochastically (params or state arrays): the kernels then key
  /// each param's random bits by its name and step.
  bool keyed() const {
    return rounding == Rounding::stochastic || state_rounding == Rounding::stochastic;
  }
};

/// Throws kopt::InvalidArgument naming the field when `storage` is invalid.
void validate(const StateStorage& storage);

}  // namespace kopt
