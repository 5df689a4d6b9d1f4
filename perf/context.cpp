// What both perf binaries share: the suite's size (--full) and the context every result file
// carries so a figure can be read: versions, backends, threads and their binding, CPU model,
// git revision, build, machine load.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <kopt/kopt.hpp>
#include <string>
#include <thread>

#include "common.hpp"

namespace kopt_perf {
namespace {

bool full = false;

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
  benchmark::AddCustomContext("suite", full ? "full" : "quick (--full runs every size)");
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

void take_full_flag(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0)
      full = true;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
}

std::vector<int> update_size_exponents() {
  std::vector<int> e;
  for (int k = 16; k <= 26; k += full ? 1 : 2) e.push_back(k);
  return e;
}

}  // namespace kopt_perf
