#pragma once
/// \file
/// Every algorithm's policy, in AlgorithmConfig's order (each config names its own), and
/// the one visitor that turns a group's algorithm into a policy type.

#include <kopt/algorithm_config.hpp>
#include <kopt/impl/policies/adafactor.hpp>
#include <kopt/impl/policies/adagrad.hpp>
#include <kopt/impl/policies/adam.hpp>
#include <kopt/impl/policies/lamb.hpp>
#include <kopt/impl/policies/lion.hpp>
#include <kopt/impl/policies/muon.hpp>
#include <kopt/impl/policies/sgd.hpp>
#include <tuple>
#include <type_traits>
#include <variant>

/// X(arg, Policy) for each algorithm's policy, in AlgorithmConfig's order, for what must be
/// spelled per policy (the engines' explicit instantiations). The static_assert below fails
/// the build when an algorithm is added to AlgorithmConfig and not here.
#define KOPT_FOR_EACH_POLICY(X, arg) \
  X(arg, kopt::Impl::AdamPolicy)     \
  X(arg, kopt::Impl::SgdPolicy)      \
  X(arg, kopt::Impl::LionPolicy)     \
  X(arg, kopt::Impl::AdagradPolicy)  \
  X(arg, kopt::Impl::LambPolicy)     \
  X(arg, kopt::Impl::MuonPolicy)     \
  X(arg, kopt::Impl::AdafactorPolicy)

namespace kopt::Impl {

namespace detail {
template <class... P>
struct PolicyList {};
template <class... P>
constexpr bool configs_in_order(PolicyList<void, P...>) {
  return std::is_same_v<std::variant<typename P::Config...>, AlgorithmConfig>;
}
#define KOPT_POLICY_TYPE(arg, P) , P
static_assert(configs_in_order(PolicyList<void KOPT_FOR_EACH_POLICY(KOPT_POLICY_TYPE, )>{}),
              "KOPT_FOR_EACH_POLICY must list the policy of every AlgorithmConfig, in its order");
#undef KOPT_POLICY_TYPE
}  // namespace detail

/// Calls f(Policy{}) with the policy of algorithm `index` (an AlgorithmConfig index).
template <class F>
decltype(auto) visit_policy(std::size_t index, F&& f) {
  return visit_config_type(
      index, [&](auto config) -> decltype(auto) { return f(typename decltype(config)::Policy{}); });
}

}  // namespace kopt::Impl
