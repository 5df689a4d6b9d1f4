#pragma once
/// \file
/// An ordered queue of asynchronous byte copies between a param's memory and host memory,
/// the offload pipeline's transport. One queue per direction, so device-to-host grad copies
/// and host-to-device param copies run side by side. The CUDA queue (backends/cuda) is a
/// stream of its own; the host queue, which host-only builds run the pipeline with, is a
/// worker thread that plays the part of a device's copy engine.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kopt::Impl {

class CopyQueue {
 public:
  /// Copies enqueued before a mark; waiting on it waits for exactly those.
  using Ticket = std::uint64_t;

  virtual ~CopyQueue() = default;
  /// Enqueues a copy of `bytes` bytes from `src` to `dst` and returns at once. Both stay
  /// untouched by the caller until a wait on a later mark returns.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// A ticket for every copy enqueued so far.
  virtual Ticket mark() = 0;
  /// Blocks until every copy enqueued before `ticket` was marked has landed. Throws
  /// kopt::BackendError when a copy failed.
  virtual void wait(Ticket ticket) = 0;
  /// Blocks until every copy enqueued so far has landed.
  void drain() { wait(mark()); }
};

/// A queue whose copies a worker thread runs in order (memcpy).
std::unique_ptr<CopyQueue> make_host_copy_queue();

/// Test hook: every host queue copy from now on first sleeps this long, like a slow link,
/// so a pipeline that reads a copy before waiting for it fails every time, not by chance.
void set_host_copy_latency(std::chrono::microseconds latency);

}  // namespace kopt::Impl
