#pragma once
/// \file
/// Named regions for Kokkos Tools (the Kokkos Tools connectors, Nsight Systems, VTune)
/// around kopt's top-level calls, so a profile shows a step, a save or a load as one span
/// with its kernels and copies inside.

#include <Kokkos_Core.hpp>
#include <string>

namespace kopt::Impl {

/// Pushes `name` on construction and pops it on every exit path, exceptions included (the
/// tools need balanced pushes). `name` outlives the region: pass one of the constants below
/// (no string is built per call on the step's path).
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ProfilingRegion() { Kokkos::Profiling::popRegion(); }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;
};

namespace regions {
inline const std::string step = "kopt::HybridOptimizer::step";
inline const std::string save = "kopt::HybridOptimizer::save";
inline const std::string load = "kopt::HybridOptimizer::load";
}  // namespace regions

}  // namespace kopt::Impl
