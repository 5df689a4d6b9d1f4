#pragma once
/// \file
/// The switch that runs kopt's device code paths on host spaces, for tests.

#include <atomic>

namespace kopt::Impl {

/// Whether launch_chunks runs the device path (a league of teams) on host spaces too, and the
/// tensor stages their device passes (kopt/impl/item_lanes.hpp). Only the host path runs
/// where there is no GPU, as in CI: tests switch this on (ScopedTeamPaths) to run every
/// chunk kernel's team operator and every device pass on Serial and OpenMP and compare them
/// bitwise with the host path, so an indexing bug in device code fails on any machine. Off
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

}  // namespace kopt::Impl
