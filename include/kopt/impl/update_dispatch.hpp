#pragma once
/// \file
/// From a launch's run-time description (the param and grad dtypes, the policy's variant,
/// the state's storage) to the compile-time types of its update: the visitors every engine's
/// launch goes through, so each compiled combination is chosen in one place.

#include <cassert>
#include <kopt/dtype.hpp>
#include <kopt/impl/element_update.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>
#include <type_traits>
#include <utility>

namespace kopt::Impl {

/// Whether a policy's state arrays may be q8 (its config's q8_square_arrays).
template <class Policy>
inline constexpr bool has_q8_state = requires {
  Policy::Config::q8_square_arrays;
};

/// Calls `f` with a value of the C++ element type of `dtype` (float, bfloat16, float16).
template <class F>
void visit_update_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(bfloat16{});
      return;
    case DType::f16:
      f(float16{});
      return;
    default:
      break;
  }
  assert(false && "kopt: no kernel for this dtype; the registry should have refused it");
}

/// Bit k: the policy's array k, stored as q8, holds its square roots (its config's
/// q8_square_arrays; 0 for an algorithm without q8 state).
template <class Policy>
constexpr unsigned q8_roots_of() {
  if constexpr (requires { Policy::Config::q8_square_arrays; })
    return Policy::Config::q8_square_arrays;
  else
    return 0u;
}

/// Calls f(std::integral_constant<int, V>{}) for the policy variant V == `variant`.
template <class Policy, int V = 0, class F>
void visit_variant(int variant, F&& f) {
  if constexpr (V < Policy::num_variants) {
    if (variant == V) return f(std::integral_constant<int, V>{});
    visit_variant<Policy, V + 1>(variant, std::forward<F>(f));
  } else {
    assert(false && "kopt: no such variant of the policy");
  }
}

/// Calls f(Form<M, S>{}) for the form of `storage` over a param of type ParamT: S float when
/// every state array is f32, bfloat16 when every one is bf16 rounded to nearest, else
/// NarrowState; M of
/// storage.master (an f32 param is its own master whatever it says; remainders and stochastic
/// rounding are of bf16 params, which the engines check).
template <class ParamT, class Fn>
void visit_form(const StateStorage& storage, Fn&& f) {
  const auto with_master = [&](auto master) {
    using M = decltype(master);
    if (storage.wide()) return f(Form<M, float>{});
    // Stochastic state rounding takes the per-array form, which draws each array's bits (on
    // host spaces, where every stream is 16-bit, its loop runs the all-bf16 one's vectors
    // with stochastic stores: narrow_host_loop).
    if (storage.all(DType::bf16) && storage.state_rounding == Rounding::nearest)
      return f(Form<M, bfloat16>{});
    return f(Form<M, NarrowState>{});
  };
  if constexpr (!std::is_same_v<ParamT, float>) {
    if (storage.master == MasterStorage::none && storage.rounding == Rounding::nearest)
      return with_master(RoundToNearest{});
  }
  if constexpr (std::is_same_v<ParamT, bfloat16>) {
    if (storage.master == MasterStorage::remainder) return with_master(std::uint16_t{});
    if (storage.master == MasterStorage::none) return with_master(RoundStochastic{});
  }
  assert((std::is_same_v<ParamT, float> || storage.master == MasterStorage::f32));
  return with_master(float{});
}

}  // namespace kopt::Impl
