#include <atomic>
#include <kopt/impl/fault_injection.hpp>
#include <new>

namespace kopt::Impl {

namespace {
std::atomic<std::int64_t> fail_after{-1};
std::atomic<std::int64_t> passed{0};
}  // namespace

void set_allocation_failure_after(std::int64_t n) { fail_after = n; }

void allocation_point() {
  passed.fetch_add(1, std::memory_order_relaxed);
  std::int64_t left = fail_after.load(std::memory_order_relaxed);
  if (left < 0) return;
  // Count down to 0, then stay there: every later allocation fails too, as on a full device.
  while (left > 0 && !fail_after.compare_exchange_weak(left, left - 1)) {
  }
  if (left == 0) throw std::bad_alloc();
}

std::int64_t allocation_points_passed() { return passed.load(std::memory_order_relaxed); }

}  // namespace kopt::Impl
