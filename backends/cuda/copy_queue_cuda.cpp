// The CUDA copy queue: a stream of kopt's own (not the model's), with an event per mark so a
// wait blocks on exactly the copies it needs.
#include <cuda_runtime.h>

#include <deque>
#include <kopt/error.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <utility>
#include <vector>

namespace kopt::Impl {

namespace {

void check(cudaError_t status, const char* what) {
  KOPT_THROW_IF_AS(BackendError, status != cudaSuccess,
                   "kopt offload copy queue: " << what << " failed: "
                                               << cudaGetErrorString(status));
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
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
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
    if (pending_.empty()) {
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      return;
    }
    check(cudaEventSynchronize(pending_.front().second), "cudaEventSynchronize");
  }

 private:
  cudaStream_t stream_ = nullptr;
  Ticket enqueued_ = 0;
  std::deque<std::pair<Ticket, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

std::unique_ptr<CopyQueue> make_cuda_copy_queue() { return std::make_unique<CudaCopyQueue>(); }

}  // namespace kopt::Impl
