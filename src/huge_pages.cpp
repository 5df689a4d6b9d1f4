#include <cstdint>
#include <kopt/impl/huge_pages.hpp>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kopt::Impl {

void advise_huge_pages([[maybe_unused]] void* data, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t page = 4096, huge = std::uintptr_t{2} << 20;
  if (data == nullptr || bytes < huge) return;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(page - 1);
  if (end <= begin) return;
  // A hint: a failure (THP compiled out, an old kernel) changes nothing kopt relies on.
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) != 0) return;
  // Small pages already behind the range (reused heap memory) stay small until dropped: the
  // range is ours and its contents are still undefined, so they go. Measured in the test
  // suite's process: 16 MiB state arrays from reused heap had no huge page without this.
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#endif
}

}  // namespace kopt::Impl
