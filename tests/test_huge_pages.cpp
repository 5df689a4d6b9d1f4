// kopt's host state arrays are advised onto transparent huge pages before their first touch
// (kopt/impl/huge_pages.hpp), and fresh moments still start at zero in the fused and the
// offload engine. Linux with THP in `madvise` or `always`
// mode only; elsewhere the advice is a no-op and the test is skipped.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <kopt/kopt.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {
namespace test_huge_pages {

bool huge_pages_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

// The rest of the line starting with `key` in the /proc/self/smaps entry of the mapping
// holding `p`; empty if no mapping holds it.
std::string smaps_field_at(const void* p, const std::string& key) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind(key, 0) == 0) return line.substr(key.size());
  }
  return "";
}

// AnonHugePages (kB) of the mapping holding `p`; -1 if none holds it.
long huge_kb_at(const void* p) {
  const std::string kb = smaps_field_at(p, "AnonHugePages:");
  return kb.empty() ? -1 : std::stol(kb);
}

// Whether the mapping holding `p` is advised onto huge pages ("hg" in its VmFlags).
bool advised_at(const void* p) {
  return (smaps_field_at(p, "VmFlags:") + " ").find(" hg ") != std::string::npos;
}

// The system's count of page faults that wanted a huge page and got a small one (no free
// huge page: memory fragmented or short, e.g. other processes running beside the test; or
// the cgroup refused to charge one).
long thp_fallbacks() {
  std::ifstream vmstat("/proc/vmstat");
  std::string key;
  long value = 0, sum = 0;
  while (vmstat >> key >> value)
    if (key == "thp_fault_fallback" || key == "thp_fault_fallback_charge") sum += value;
  return sum;
}

TEST(HugePages, FusedAndOffloadStateSitOnHugePages) {
  if (!huge_pages_available()) GTEST_SKIP() << "transparent huge pages are off here";
  // The hard case, as in a long training process: the state arrays come from heap memory an
  // earlier allocation already faulted in as small pages (glibc raises its mmap threshold
  // after large frees, and serves large requests from free heap first). Made certain here:
  // 256 MiB of heap touched and freed, neither mapped apart nor trimmed. The advice alone
  // left such pages small (the whole-suite run at 1 and 4 threads failed this test).
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1024 << 20);
  struct Restore {  // glibc's defaults, for the tests after this one
    ~Restore() {
      mallopt(M_MMAP_THRESHOLD, 128 << 10);
      mallopt(M_TRIM_THRESHOLD, 128 << 10);
    }
  } restore;
  {
    std::vector<char> touched(std::size_t{256} << 20, 1);
    ASSERT_EQ(touched[touched.size() / 2], 1);
  }
  const std::int64_t n = std::int64_t{1} << 22;  // 16 MiB per state array
  std::vector<float> param(static_cast<std::size_t>(n), 0.5f), grad(param.size(), 0.25f);
  using Exec = Kokkos::DefaultHostExecutionSpace;
  // The kernel backs advised memory with huge pages as it can: beside other heavy processes
  // (ctest -j2 at 4 threads on 2 cores) a fault now and then takes small pages without
  // counting a fallback. So up to three fresh engines: advice given after the first touch
  // (the bug this test is for) fails all three.
  bool backed = false;
  for (int attempt = 0; attempt < 3 && !backed; ++attempt) {
    std::vector<float> p(param);
    kopt::FusedAdam<Exec> fused(Exec(), kopt::AdamConfig{}, "huge");
    fused.add("w", kopt::Tensor::from(p.data(), n), kopt::Tensor::from(grad.data(), n));
    const long fallbacks = thp_fallbacks();
    fused.step();
    Kokkos::fence();
    const auto s = fused.state("w");
    // Mid-array: the array's first page (shared with the allocation's header) is not advised.
    backed = true;
    for (const float* mid : {s.exp_avg.data() + n / 2, s.exp_avg_sq.data() + n / 2}) {
      EXPECT_TRUE(advised_at(mid));
      // Backed by huge pages unless the kernel had none to give (then it counts a fallback).
      backed = backed && (huge_kb_at(mid) > 0 || thp_fallbacks() != fallbacks);
    }
    EXPECT_FLOAT_EQ(s.exp_avg(n - 1), 0.1f * 0.25f);  // zero-initialized, then one update
    if (attempt == 0) param = p;
  }
  EXPECT_TRUE(backed) << "advised state arrays got no huge page in three tries";

  // The offload engine's host state, allocated the same way: fresh moments are zeros, so one
  // step gives the fused engine's params bit for bit.
  std::vector<float> p2(param.size(), 0.5f), g2(param.size(), 0.25f);
  kopt::ParamGroup group({}, kopt::StatePlacement::host);
  group.add("v", kopt::Tensor::from(p2.data(), n), kopt::Tensor::from(g2.data(), n));
  kopt::HybridOptimizer opt({group});
  opt.step();
  EXPECT_EQ(p2, param);
}

}  // namespace test_huge_pages
}  // namespace
