#pragma once
/// \file
/// make_fused_engine's definition: an engine of any algorithm on `ExecSpace`. Included by the
/// per-backend files, which instantiate it (and with it every policy's kernels) for their space.

#include <kopt/impl/engine.hpp>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/impl/policies.hpp>

namespace kopt::Impl {

template <class ExecSpace>
std::unique_ptr<Engine> make_fused_engine(const ExecSpace& exec, std::size_t algorithm,
                                          const std::string& label, const StateStorage& storage) {
  return visit_policy(algorithm, [&](auto policy) -> std::unique_ptr<Engine> {
    return std::make_unique<EngineFor<ExecSpace, decltype(policy)>>(exec, label, storage);
  });
}

}  // namespace kopt::Impl
