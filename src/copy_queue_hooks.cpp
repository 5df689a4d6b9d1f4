// The copy queues' test hooks that every queue obeys, host and CUDA alike (copy_queue.hpp).
#include <atomic>
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>

namespace kopt::Impl {

namespace {
std::atomic<std::int64_t> copies_before_failure{-1};  // the failure hook; < 0: off
std::atomic<std::uint64_t> operations{0}, copies{0};  // the counting hooks
}  // namespace

void set_host_copy_failure_after(std::int64_t copies) { copies_before_failure = copies; }

std::uint64_t host_copy_operations() { return operations.load(std::memory_order_relaxed); }

std::uint64_t host_copies() { return copies.load(std::memory_order_relaxed); }

void count_copy_operation(std::size_t count) {
  operations.fetch_add(1, std::memory_order_relaxed);
  copies.fetch_add(count, std::memory_order_relaxed);
}

// Counts down to 0, fails that one operation, then stays off.
bool injected_copy_failure() {
  std::int64_t left = copies_before_failure.load(std::memory_order_relaxed);
  while (left >= 0 && !copies_before_failure.compare_exchange_weak(left, left - 1)) {
  }
  return left == 0;
}

void throw_injected_copy_failure() {
  throw BackendError(
      error_message("a host offload copy failed (injected by the test hook)", __FILE__, __LINE__));
}

}  // namespace kopt::Impl
