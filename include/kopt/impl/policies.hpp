#pragma once
/// \file
/// Every algorithm's policy, in AlgorithmConfig's order (each config names its own), and
/// the one visitor that turns a group's algorithm into a policy type.

#include <kopt/algorithm_config.hpp>
#include <kopt/impl/policies/adagrad.hpp>
#include <kopt/impl/policies/adam.hpp>
#include <kopt/impl/policies/lion.hpp>
#include <kopt/impl/policies/sgd.hpp>
#include <tuple>

namespace kopt::Impl {

/// Calls f(Policy{}) with the policy of algorithm `index` (an AlgorithmConfig index).
template <class F>
decltype(auto) visit_policy(std::size_t index, F&& f) {
  return visit_config_type(
      index, [&](auto config) -> decltype(auto) { return f(typename decltype(config)::Policy{}); });
}

}  // namespace kopt::Impl
