#pragma once
/// \file
/// An ordered queue of asynchronous byte copies between a param's memory and host memory,
/// the offload pipeline's transport. On a GPU one queue per direction, so device-to-host grad
/// copies and host-to-device param copies run side by side on its two copy engines. The CUDA queue
/// (backends/cuda) is a stream of its own; the host queue, which host-only builds run the pipeline
/// with, is a worker thread that plays the part of a device's copy engine.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kopt::Impl {

/// One copy of a batch (CopyQueue::copy_batch).
struct CopyOp {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

class CopyQueue {
 public:
  /// Copies enqueued before a mark; waiting on it waits for exactly those.
  using Ticket = std::uint64_t;

  virtual ~CopyQueue() = default;
  /// Enqueues a copy of `bytes` bytes from `src` to `dst` and returns at once. Both stay
  /// untouched by the caller until a wait on a later mark returns.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Enqueues `count` copies as one operation and returns at once: on a GPU one kernel on
  /// the queue's stream whose blocks copy them all, reading and writing pinned host memory
  /// directly (so 100,000 tiny copies cost one launch, not 100,000 DMA transfers of a few
  /// microseconds' setup each); on the host one job of the worker. `ops` must be memory the
  /// queue's device can read (the offload engine's state memory: pinned on a GPU) and, like
  /// the buffers, stays untouched by the caller until a wait on a later mark returns.
  virtual void copy_batch(const CopyOp* ops, std::size_t count) = 0;
  /// A ticket for every copy enqueued so far.
  virtual Ticket mark() = 0;
  /// Blocks until every copy enqueued before `ticket` was marked has landed. Throws
  /// kopt::BackendError when a copy failed.
  virtual void wait(Ticket ticket) = 0;
  /// Blocks until every copy enqueued so far has landed.
  void drain() { wait(mark()); }
};

enum class CopyDirection { to_host, to_device };

/// A queue whose copies a worker thread runs in order (memcpy). The direction only picks
/// which test latency it plays (a shared queue is built as to_host).
std::unique_ptr<CopyQueue> make_host_copy_queue(CopyDirection direction = CopyDirection::to_host);

/// How host offload engines copy: one worker thread for both directions (the default: on a
/// host-only machine a second copy thread only competes with the update for the same cores
/// and memory bandwidth), or one per direction, as a GPU's two copy engines run.
enum class HostCopyWorkers { shared, one_per_direction };

/// Test hook: the workers of host offload engines created from now on. With one per
/// direction, the order between grads and params copies is only what the pipeline's waits
/// enforce, so tests can check those waits.
void set_host_copy_workers(HostCopyWorkers workers);
HostCopyWorkers host_copy_workers();

/// Test hook: every host queue operation (a copy or a batch) from now on first sleeps this
/// long, by direction, like a slow link, so a pipeline that reads a copy before waiting for
/// it fails every time, not by chance. A slower to_device direction exposes a staging buffer
/// reused too early.
void set_host_copy_latency(std::chrono::microseconds to_host, std::chrono::microseconds to_device);
/// Test hook: the host offload engines' copy queue operation after `copies` more fails (none
/// of its bytes are copied; the next wait on its queue throws kopt::BackendError), as a device
/// copy can; then the hook turns itself off. Negative (the default): off. Every queue obeys it
/// (host and CUDA), so the pipeline's failure handling is tested on every build.
void set_host_copy_failure_after(std::int64_t copies);
/// Test hook: the operations (a copy, or a batch of them) the host offload engines' copy queues
/// (host and CUDA) have enqueued since the process started, so tests can count what a step
/// enqueues.
std::uint64_t host_copy_operations();
/// Test hook: the copies in those operations (a batch's ops each, a lone copy one), so tests
/// can see copies joined (adjacent ones of a batch become one).
std::uint64_t host_copies();

/// For the queues themselves (src/copy_queue_hooks.cpp): count_copy_operation(copies) once
/// per operation enqueued; injected_copy_failure() once per operation run, true for the one the
/// failure hook fails (its bytes then stay uncopied); throw_injected_copy_failure() at the
/// next wait on that queue.
void count_copy_operation(std::size_t copies);
bool injected_copy_failure();
[[noreturn]] void throw_injected_copy_failure();

}  // namespace kopt::Impl
