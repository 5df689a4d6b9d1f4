#pragma once
/// \file
/// The switch that runs kopt's device code paths on host spaces, for tests.

#include <atomic>
#include <kopt/compat.hpp>
#include <type_traits>

namespace kopt::Impl {

/// Whether launch_chunks runs the device path (a league of teams) on host spaces too, and the
/// tensor stages their device passes (kopt/impl/item_lanes.hpp). Only the host path runs
/// where there is no GPU, as in CI: tests switch this on (ScopedTeamPaths) to run every
/// chunk kernel's team operator and every device pass on the default host space and compare
/// them bitwise with the host path, so an indexing bug in device code fails on any machine. Off
/// otherwise; one relaxed load per launch.
inline std::atomic<bool>& host_team_paths() {
  static std::atomic<bool> on{false};
  return on;
}
/// Sets host_team_paths() for its lifetime (not nested, not concurrent with other launches'
/// threads that must keep the host path).
struct ScopedTeamPaths {
  ScopedTeamPaths() { host_team_paths() = true; }
  ~ScopedTeamPaths() { host_team_paths() = false; }
  ScopedTeamPaths(const ScopedTeamPaths&) = delete;
  ScopedTeamPaths& operator=(const ScopedTeamPaths&) = delete;
};

/// Whether ExecSpace's kernels have their device paths compiled: on devices, and on the one
/// host space that host and offloaded groups run on (DefaultHostExecutionSpace), where the
/// tests run them. Not on a second host space (Serial beside OpenMP): no test ran them there,
/// and they took two thirds of the compile time of its engines (fused_serial.cpp, GCC 12:
/// 161 -> 53 s), in each of the test script's three builds.
template <class ExecSpace>
inline constexpr bool has_device_paths =
    !runs_on_host<ExecSpace> || std::is_same_v<ExecSpace, Kokkos::DefaultHostExecutionSpace>;

/// Whether a launch on ExecSpace takes its device path: always on devices; on the host space
/// that has them, under ScopedTeamPaths.
template <class ExecSpace>
bool takes_device_paths() {
  if constexpr (!runs_on_host<ExecSpace>)
    return true;
  else
    return has_device_paths<ExecSpace> && host_team_paths().load(std::memory_order_relaxed);
}

}  // namespace kopt::Impl
