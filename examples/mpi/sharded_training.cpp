// ZeRO-2 over MPI: every rank computes the grads of its own data; kopt reduce-scatters them
// (their mean), each rank updates and keeps state for its shard only, and the updated
// params are all-gathered. Run with e.g. `mpirun -np 2 kopt_example_sharded_training`.
// Each rank fits w to the mean of the ranks' targets and prints its share of the state.
#include <mpi.h>

#include <cstdio>
#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  bool ok = false;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    const int n = 100000;
    std::vector<float> w(n, 0.0f), dw(n);
    kopt::ParamGroup group(kopt::AdamConfig{.lr = 0.05, .weight_decay = 0.0});
    group.add("w", kopt::Tensor::from(w.data(), n), kopt::Tensor::from(dw.data(), n));
    kopt::HybridOptions options{.max_grad_norm = 1000.0};
    options.sharding = kopt::ShardingOptions{
        .communicator = std::make_shared<kopt::MpiCommunicator>(MPI_COMM_WORLD),
        .stage = kopt::ZeroStage::two,
        .reduction = kopt::GradReduction::average};
    kopt::HybridOptimizer opt({group}, options);
    // Rank r's data pulls w towards r; the mean over ranks pulls it to (world - 1) / 2.
    const float mine = static_cast<float>(rank), mean = 0.5f * static_cast<float>(world - 1);
    double loss = 0, first = -1;
    for (int step = 1; step <= 200; ++step) {
      loss = 0;
      for (int i = 0; i < n; ++i) {
        dw[i] = w[i] - mine;  // this rank's grads only
        loss += 0.5 * (w[i] - mean) * (w[i] - mean);
      }
      if (first < 0) first = loss;
      opt.step();  // collective
    }
    std::size_t bytes = 0;
    for (const auto& [space, b] : opt.state_bytes()) bytes += b;
    std::printf("rank %d of %d: loss %.4g -> %.4g, state %zu bytes (%.2f of %zu unsharded)\n", rank,
                world, first, loss, bytes, static_cast<double>(bytes) / (8.0 * n),
                static_cast<std::size_t>(8 * n));
    ok = loss <= 1e-3 * first + 1e-9;
  }
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
