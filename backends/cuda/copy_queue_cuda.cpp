// The CUDA copy queue: a stream of kopt's own (not the model's), with an event per mark so a
// wait blocks on exactly the copies it needs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <utility>
#include <vector>

namespace kopt::Impl {

namespace {

// Copies ops[k] for k = blockIdx.x, blockIdx.x + gridDim.x, ...: each block one op at a
// time, its threads striding through it in the widest unit that divides both addresses and
// the size (16-bit params land at any even offset), so a warp's accesses are contiguous.
template <class Unit>
__device__ void copy_units(const CopyOp& op) {
  Unit* dst = static_cast<Unit*>(op.dst);
  const Unit* src = static_cast<const Unit*>(op.src);
  const std::size_t n = op.bytes / sizeof(Unit);
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

__global__ void copy_batch_kernel(const CopyOp* ops, std::size_t count) {
  for (std::size_t k = blockIdx.x; k < count; k += gridDim.x) {
    const CopyOp op = ops[k];
    const auto bits = reinterpret_cast<std::uintptr_t>(op.dst) |
                      reinterpret_cast<std::uintptr_t>(op.src) | op.bytes;
    if (bits % 16 == 0)
      copy_units<uint4>(op);
    else if (bits % 4 == 0)
      copy_units<unsigned>(op);
    else if (bits % 2 == 0)
      copy_units<unsigned short>(op);
    else
      copy_units<unsigned char>(op);
  }
}

void check(cudaError_t status, const char* what) {
  KOPT_THROW_IF_AS(
      BackendError, status != cudaSuccess,
      "kopt offload copy queue: " << what << " failed: " << cudaGetErrorString(status));
}

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
  ~CudaCopyQueue() override {
    cudaStreamSynchronize(stream_);  // never free what a copy still reads or writes
    for (auto& p : pending_) cudaEventDestroy(p.second);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    if (!hooks_fail_(1))
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
    ++enqueued_;
  }
  void copy_batch(const CopyOp* ops, std::size_t count) override {
    if (count == 0) return;
    if (!hooks_fail_(count)) {
      constexpr std::size_t max_blocks = 4096, threads = 256;
      copy_batch_kernel<<<static_cast<unsigned>(std::min(count, max_blocks)), threads, 0,
                          stream_>>>(ops, count);
      check(cudaGetLastError(), "the batched copy kernel's launch");
    }
    ++enqueued_;
  }
  Ticket mark() override {
    if (!pending_.empty() && pending_.back().first == enqueued_) return enqueued_;
    cudaEvent_t event = nullptr;
    if (free_.empty()) {
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    } else {
      event = free_.back();
      free_.pop_back();
    }
    check(cudaEventRecord(event, stream_), "cudaEventRecord");
    pending_.emplace_back(enqueued_, event);
    return enqueued_;
  }
  void wait(Ticket ticket) override {
    // The first event recorded at or after `ticket` covers it; events before it are done
    // too once it is, and go back to the free list.
    while (!pending_.empty() && pending_.front().first < ticket) {
      free_.push_back(pending_.front().second);
      pending_.pop_front();
    }
    if (pending_.empty())
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    else
      check(cudaEventSynchronize(pending_.front().second), "cudaEventSynchronize");
    // Reported once, to the first waiter after it, as the host queue does.
    if (std::exchange(failed_, false)) throw_injected_copy_failure();
  }

 private:
  // The test hooks (copy_queue.hpp): counts the operation; true when it is to fail, which
  // then enqueues nothing and the next wait reports it.
  bool hooks_fail_(std::size_t copies) {
    count_copy_operation(copies);
    const bool fail = injected_copy_failure();
    failed_ = failed_ || fail;
    return fail;
  }

  cudaStream_t stream_ = nullptr;
  Ticket enqueued_ = 0;
  std::deque<std::pair<Ticket, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> free_;
  bool failed_ = false;  // the failure hook failed an operation no wait has reported yet
};

}  // namespace

std::unique_ptr<CopyQueue> make_cuda_copy_queue() { return std::make_unique<CudaCopyQueue>(); }

}  // namespace kopt::Impl
