// kopt's perf suite: one Google Benchmark binary over every enabled backend. `--full` runs
// every size and variant; the default is a subset that runs in a few minutes on 2 cores.
#include <benchmark/benchmark.h>

#include <kopt/kopt.hpp>

#include "common.hpp"
#include "peers.hpp"

int main(int argc, char** argv) {
  kopt_perf::take_suite_flags(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kopt_perf::add_context();
  benchmark::AddCustomContext("libtorch", kopt_perf::libtorch_info());
  kopt_perf::register_update_benchmarks();
  kopt_perf::register_algorithm_benchmarks();
  kopt_perf::register_tensor_split_benchmarks();
  kopt_perf::register_norm_and_hybrid_benchmarks();
  kopt_perf::register_peer_benchmarks();
  kopt_perf::register_offload_benchmarks();
  kopt_perf::register_many_params_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
