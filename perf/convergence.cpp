// kopt_convergence: trains the harness's MLP (perf/convergence_run.hpp) once per state
// storage option and writes every step's loss to a CSV (step,option,loss) for
// scripts/plot-convergence.py; prints each option's final loss beside the reference's.
//
// Usage: kopt_convergence OUT.csv [OPTION...]   (default: every option, in table order)
#include <chrono>
#include <cstdio>
#include <exception>
#include <kopt/kopt.hpp>
#include <string>
#include <vector>

#include "convergence_run.hpp"

namespace kc = kopt_convergence;

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.csv [OPTION...]\n", argv[0]);
    return 2;
  }
  std::vector<const kc::StorageOption*> options;
  try {
    for (int a = 2; a < argc; ++a) options.push_back(&kc::find_option(argv[a]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (options.empty())
    for (const kc::StorageOption& o : kc::storage_options) options.push_back(&o);

  std::FILE* csv = std::fopen(argv[1], "w");
  if (!csv) {
    std::perror(argv[1]);
    return 1;
  }
  std::fprintf(csv, "step,option,loss\n");
  const kc::TrainConfig config;
  std::printf("%s\n%d steps, batch %d, student", kopt::build_info().c_str(), config.steps,
              config.batch);
  for (int n : config.student) std::printf(" %d", n);
  std::printf(", AdamW lr %g (warmup %d, cosine to %g), seed %llu\n\n", config.lr, config.warmup,
              config.final_lr, static_cast<unsigned long long>(config.seed));
  std::printf("%-28s %12s %12s %10s %10s %8s\n", "option", "final loss", "eval loss", "final/ref",
              "eval/ref", "seconds");
  const kc::Curve reference = kc::train(kc::reference_option(), config);
  for (const kc::StorageOption* o : options) {
    const auto t0 = std::chrono::steady_clock::now();
    const kc::Curve curve = kc::train(*o, config);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (std::size_t k = 0; k < curve.loss.size(); ++k)
      std::fprintf(csv, "%zu,%s,%.9g\n", k + 1, o->name, curve.loss[k]);
    std::printf("%-28s %12.6g %12.6g %10.4f %10.4f %8.3f\n", o->name, kc::final_loss(curve),
                curve.eval_loss, kc::final_loss(curve) / kc::final_loss(reference),
                curve.eval_loss / reference.eval_loss, seconds);
  }
  std::printf(
      "\n(final loss: mean of the last 100 steps' minibatch losses; eval loss: %d "
      "held-out samples after the last step)\n",
      config.held_out);
  return std::fclose(csv) == 0 ? 0 : 1;
}
