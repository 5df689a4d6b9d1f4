// What both perf binaries share: the suite's size (--full) and the context every result file
// carries so a figure can be read: versions, backends, threads and their binding, CPU model,
// git revision, build, machine load.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <kopt/kopt.hpp>
#include <string>
#include <thread>

#include "common.hpp"

namespace kopt_perf {
namespace {

bool full = false, smoke = false;

std::string first_line_of(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line
                                        : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

}  // namespace

void add_context() {
  benchmark::AddCustomContext("kopt", kopt::build_info());
  benchmark::AddCustomContext("suite", full    ? "full"
                                       : smoke ? "smoke (sizes / 1024)"
                                               : "quick (--full runs every size)");
  benchmark::AddCustomContext("cpu_model", first_line_of("/proc/cpuinfo", "model name"));
  benchmark::AddCustomContext("hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("host_threads",
                              std::to_string(Kokkos::DefaultHostExecutionSpace().concurrency()));
  benchmark::AddCustomContext("OMP_PROC_BIND", env_or("OMP_PROC_BIND", "unset"));
  benchmark::AddCustomContext("OMP_PLACES", env_or("OMP_PLACES", "unset"));
  benchmark::AddCustomContext("git_revision", env_or("KOPT_GIT_REVISION", KOPT_PERF_GIT_REVISION));
  benchmark::AddCustomContext("build", KOPT_PERF_BUILD);
  benchmark::AddCustomContext("load_average_at_start",
                              first_line_of("/proc/loadavg", "").substr(0, 14));
}

bool full_suite() { return full; }
bool smoke_suite() { return smoke; }

void take_suite_flags(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0)
      full = true;
    else if (std::strcmp(argv[i], "--smoke") == 0)
      smoke = true;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
}

std::int64_t scaled(std::int64_t n) { return smoke ? std::max<std::int64_t>(1, n >> 10) : n; }

std::vector<std::int64_t> pow2_sizes(const std::vector<int>& quick, const std::vector<int>& every) {
  std::vector<std::int64_t> sizes;
  for (const int e : full ? every : quick) sizes.push_back(scaled(std::int64_t{1} << e));
  return sizes;
}

}  // namespace kopt_perf
