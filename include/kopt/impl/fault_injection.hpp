#pragma once
/// \file
/// Failure injection for the exception-safety tests: an allocation of optimizer state or of a
/// step's plan that fails on demand, as a full device would make it fail. Production code
/// calls allocation_point() before each such allocation; with the hook off (the default) it
/// costs one relaxed atomic load per allocation, and allocations happen only when the set
/// of params or grads changes, never in a steady-state step.
#include <cstdint>

namespace kopt::Impl {

/// Test hook: the allocation after `n` more allocation points fails with std::bad_alloc (0: the
/// next one), and so does every later one until the hook is reset; negative (the default) turns
/// it off.
void set_allocation_failure_after(std::int64_t n);

/// Marks an allocation; throws std::bad_alloc when the test hook says this one fails.
void allocation_point();

/// Allocation points passed since the process started (tests count them to inject at each).
std::int64_t allocation_points_passed();

}  // namespace kopt::Impl
