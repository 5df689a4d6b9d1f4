// The sharded step (ZeRO-1 and ZeRO-2 over MPI), its own binary run under mpirun at 1, 2 and
// 4 ranks. Strong scaling: the same model on every world size, so each rank's share of the
// update shrinks as 1/ranks; weak scaling: the model grows with the world, each rank's share
// stays. The time of a step is the slowest rank's (all ranks step together, fixed iteration
// counts so every rank runs the same steps); only rank 0 reports.
#include <mpi.h>

#include <cstring>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>
#include <vector>

#include "common.hpp"

namespace kopt_perf {

namespace {

template <kopt::ZeroStage Stage, class ParamT>
void bm_sharded(benchmark::State& state) {
  using Mem = Kokkos::HostSpace;
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool weak = state.range(1) != 0;
  const std::int64_t n = state.range(0) * (weak ? ranks : 1);
  Kokkos::View<ParamT*, Mem> param("kopt::perf::param", n), grad("kopt::perf::grad", n);
  fill_random(param, 1);
  fill_random(grad, 2);
  kopt::ParamGroup group;
  group.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  kopt::HybridOptions options;
  options.sharding = kopt::ShardingOptions{
      .communicator = std::make_shared<kopt::MpiCommunicator>(MPI_COMM_WORLD), .stage = Stage};
  kopt::HybridOptimizer opt({group}, options);
  opt.step();
  // The step's collectives alone, straight MPI on buffers of the same sizes: the params'
  // all-gather (ZeRO-2 also the fp32 grads' reduce-scatter). What MPI costs on this machine.
  const std::int64_t share = (n + ranks - 1) / ranks;
  std::vector<ParamT> gather_in(static_cast<std::size_t>(share));
  std::vector<ParamT> gather_out(static_cast<std::size_t>(share * ranks));
  std::vector<float> scatter_in(Stage == kopt::ZeroStage::two ? share * ranks : 0);
  std::vector<float> scatter_out(Stage == kopt::ZeroStage::two ? share : 0);
  const auto slowest = [&](double t0) {
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
  };
  double total = 0.0, collectives = 0.0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (Stage == kopt::ZeroStage::two && ranks > 1)  // nor reduces grads in a world of one
      MPI_Reduce_scatter_block(scatter_in.data(), scatter_out.data(), static_cast<int>(share),
                               MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (ranks > 1)  // kopt gathers nothing in a world of one
      MPI_Allgather(gather_in.data(), static_cast<int>(share * sizeof(ParamT)), MPI_BYTE,
                    gather_out.data(), static_cast<int>(share * sizeof(ParamT)), MPI_BYTE,
                    MPI_COMM_WORLD);
    collectives += slowest(t0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    opt.step();
    const double t = slowest(t0);
    state.SetIterationTime(t);
    total += t;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["ranks"] = ranks;
  state.counters["elements"] = static_cast<double>(n);
  state.counters["per_rank"] = static_cast<double>(n) / ranks;
  state.counters["Gelem/s"] = static_cast<double>(n) * iters / total / 1e9;
  state.counters["ms"] = 1e3 * total / iters;
  state.counters["mpi_ms"] = 1e3 * collectives / iters;
  state.counters["threads"] = Kokkos::DefaultHostExecutionSpace().concurrency();
}

template <kopt::ZeroStage Stage, class ParamT>
void add_sharded(const std::string& name) {
  const std::int64_t strong = scaled(std::int64_t{1} << 24), weak = scaled(std::int64_t{1} << 23);
  add(name + "/strong", bm_sharded<Stage, ParamT>)->Args({strong, 0})->Iterations(10);
  add(name + "/weak", bm_sharded<Stage, ParamT>)->Args({weak, 1})->Iterations(10);
  if (!full_suite()) return;
  add(name + "/strong", bm_sharded<Stage, ParamT>)->Args({strong * 4, 0})->Iterations(10);
  add(name + "/weak", bm_sharded<Stage, ParamT>)->Args({weak * 4, 1})->Iterations(10);
}

}  // namespace
}  // namespace kopt_perf

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // only rank 0 writes the result file
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  {
    kopt_perf::take_suite_flags(argc, argv);
    Kokkos::ScopeGuard kokkos(argc, argv);
    benchmark::Initialize(&argc, argv);
    kopt_perf::add_context();
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    benchmark::AddCustomContext("mpi_ranks", std::to_string(world));
    using kopt::ZeroStage;
    kopt_perf::add_sharded<ZeroStage::one, kopt::bfloat16>("sharded_zero1_bf16_master");
    kopt_perf::add_sharded<ZeroStage::two, kopt::bfloat16>("sharded_zero2_bf16_master");
    if (kopt_perf::full_suite()) {
      kopt_perf::add_sharded<ZeroStage::one, float>("sharded_zero1_fp32");
      kopt_perf::add_sharded<ZeroStage::two, float>("sharded_zero2_fp32");
    }
    struct Silent : benchmark::BenchmarkReporter {
      bool ReportContext(const Context&) override { return true; }
      void ReportRuns(const std::vector<Run>&) override {}
    } silent;
    if (rank == 0)
      benchmark::RunSpecifiedBenchmarks();
    else
      benchmark::RunSpecifiedBenchmarks(&silent);
    benchmark::Shutdown();
  }
  MPI_Finalize();
  return 0;
}
