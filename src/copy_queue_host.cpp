// The host copy queue: a worker thread runs the copies in order, so host-only builds run
// the offload pipeline with the same asynchrony (and the same hazards) as a device stream.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace kopt::Impl {

namespace {

#ifdef __linux__
// The CPUs the process was given, as OpenMP saw them before binding its initial thread
// (the union of its places); the caller's own CPUs when OpenMP binds nothing.
cpu_set_t given_cpus(const cpu_set_t& caller) {
#ifdef _OPENMP
  if (const int places = omp_get_num_places(); places > 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int p = 0; p < places; ++p) {
      std::vector<int> ids(static_cast<std::size_t>(omp_get_place_num_procs(p)));
      omp_get_place_proc_ids(p, ids.data());
      for (const int id : ids)
        if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &set);
    }
    return set;
  }
#endif
  return caller;
}

// Where a worker created by the calling thread should run: the process's CPUs less the
// caller's own, when any are left. The caller drives the pipeline (it enqueues, waits and
// is OpenMP's thread 0); a worker that inherited its binding (OMP_PROC_BIND) would take
// turns with it on one core and the overlap would be lost (measured: 2x slower steps).
using CpuSet = cpu_set_t;
CpuSet worker_cpus() {
  CpuSet caller, others;
  CPU_ZERO(&others);
  if (sched_getaffinity(0, sizeof(caller), &caller) != 0) return others;  // empty: inherit
  const CpuSet given = given_cpus(caller);
  CPU_XOR(&others, &given, &caller);
  CPU_AND(&others, &others, &given);
  return CPU_COUNT(&others) > 0 ? others : caller;
}

void bind_this_thread(const CpuSet& cpus) {
  if (CPU_COUNT(&cpus) > 0)  // best effort: a refused mask keeps the inherited one
    (void)pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
}
#else
struct CpuSet {};
CpuSet worker_cpus() { return {}; }
void bind_this_thread(const CpuSet&) {}
#endif

std::atomic<std::int64_t> latency_us[2] = {0, 0};  // by CopyDirection
std::atomic<HostCopyWorkers> workers{HostCopyWorkers::shared};

class HostCopyQueue final : public CopyQueue {
 public:
  explicit HostCopyQueue(CopyDirection direction)
      : latency_(latency_us[static_cast<int>(direction)]), worker_([this, cpus = worker_cpus()] {
          bind_this_thread(cpus);
          run_();
        }) {}
  ~HostCopyQueue() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_one();
    worker_.join();
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    enqueue_(Job{CopyOp{dst, src, bytes}, nullptr, 0});
  }
  void copy_batch(const CopyOp* ops, std::size_t count) override {
    if (count == 0) return;
    enqueue_(Job{CopyOp{}, ops, count});
  }
  Ticket mark() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  void wait(Ticket ticket) override {
    std::unique_lock<std::mutex> lock(mutex_);
    landed_.wait(lock, [&] { return completed_ >= ticket; });
    // Reported once, to the first waiter after it, as a stream reports an async error.
    if (std::exchange(failed_, false)) throw_injected_copy_failure();
  }

 private:
  /// One copy (`one`), or `count` of them at `batch`.
  struct Job {
    CopyOp one;
    const CopyOp* batch;
    std::size_t count;
  };

  void enqueue_(const Job& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(job);
      ++enqueued_;
    }
    count_copy_operation(job.batch != nullptr ? job.count : 1);
    work_.notify_one();
  }

  void run_() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stop_ and nothing left
      const Job job = pending_.front();
      pending_.pop_front();
      lock.unlock();
      if (const auto us = latency_.load(std::memory_order_relaxed); us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      const bool fail = injected_copy_failure();
      if (!fail && job.batch == nullptr) std::memcpy(job.one.dst, job.one.src, job.one.bytes);
      for (std::size_t k = 0; !fail && k < job.count; ++k)
        std::memcpy(job.batch[k].dst, job.batch[k].src, job.batch[k].bytes);
      lock.lock();
      failed_ = failed_ || fail;
      ++completed_;  // under the mutex: a waiter that sees it also sees the bytes
      landed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_, landed_;
  std::deque<Job> pending_;
  Ticket enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  bool failed_ = false;                       // a copy failed and no wait has reported it yet
  const std::atomic<std::int64_t>& latency_;  // the test hook's, for this direction
  std::thread worker_;  // last: starts after everything it reads is constructed
};

}  // namespace

std::unique_ptr<CopyQueue> make_host_copy_queue(CopyDirection direction) {
  return std::make_unique<HostCopyQueue>(direction);
}

void set_host_copy_latency(std::chrono::microseconds to_host, std::chrono::microseconds to_device) {
  latency_us[static_cast<int>(CopyDirection::to_host)] = to_host.count();
  latency_us[static_cast<int>(CopyDirection::to_device)] = to_device.count();
}

void set_host_copy_workers(HostCopyWorkers layout) { workers = layout; }

HostCopyWorkers host_copy_workers() { return workers; }

}  // namespace kopt::Impl
