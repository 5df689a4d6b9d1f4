// Resuming training, both ways:
//  1. Full resume: the training code saves its model weights and calls opt.save(dir); a new
//     run restores the weights, builds the same optimizer and calls opt.load(dir). The next
//     steps are bitwise those of the run that never stopped.
//  2. Model-only resume: weights are loaded into the params of an optimizer that already
//     has state (its fp32 masters hold other values); opt.reload_model_params() refreshes
//     every master from the params, so the next step starts from the loaded weights.
#include <cstdio>
#include <filesystem>
#include <kopt/kopt.hpp>
#include <random>
#include <vector>

using Device = Kokkos::DefaultExecutionSpace;
using Weights = Kokkos::View<kopt::bfloat16*, Device::memory_space>;
using Grads = Kokkos::View<float*, Device::memory_space>;

struct Model {
  Weights w{"example::w", 1000};
  Grads dw{"example::dw", 1000};
  kopt::HybridOptimizer opt;
  Model()
      : opt({kopt::ParamGroup(kopt::AdamConfig{.lr = 0.02, .weight_decay = 0.0})
                 .add("layer.weight", kopt::Tensor(w), kopt::Tensor(dw))},
            {.max_grad_norm = 5.0}) {}
  // Gradient of 0.5 * ||w - target||^2; returns the loss.
  double backward() {
    double loss = 0;
    auto w_ = w;
    auto dw_ = dw;
    Kokkos::parallel_reduce(
        "example::backward", Kokkos::RangePolicy<Device>(0, w.extent(0)),
        KOKKOS_LAMBDA(const int i, double& sum) {
          const float d = w_(i).to_float() - (0.002f * static_cast<float>(i) - 1.0f);
          dw_(i) = d;
          sum += 0.5 * d * d;
        },
        loss);
    return loss;
  }
  double train(int steps) {
    double loss = 0;
    for (int s = 0; s < steps; ++s) {
      loss = backward();
      opt.step();
    }
    return loss;
  }
  // The model checkpoint: what the training code saves and loads itself.
  std::vector<kopt::bfloat16> weights() const {
    std::vector<kopt::bfloat16> out(w.extent(0));
    Kokkos::deep_copy(Kokkos::View<kopt::bfloat16*, Kokkos::HostSpace>(out.data(), out.size()), w);
    return out;
  }
  void set_weights(std::vector<kopt::bfloat16> v) {
    Kokkos::deep_copy(w, Kokkos::View<kopt::bfloat16*, Kokkos::HostSpace>(v.data(), v.size()));
  }
};

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kopt-example-" + std::to_string(std::random_device{}()));
  bool ok = true;
  {
    // 1. Full resume.
    Model run;
    run.train(30);
    const std::vector<kopt::bfloat16> saved = run.weights();
    run.opt.save(dir.string());
    run.train(30);

    Model resumed;
    resumed.set_weights(saved);
    resumed.opt.load(dir.string());
    resumed.train(30);
    const std::vector<kopt::bfloat16> a = resumed.weights(), b = run.weights();
    bool same = resumed.opt.step_count("layer.weight") == 60;
    for (std::size_t i = 0; i < a.size(); ++i) same &= a[i].bits == b[i].bits;
    std::printf("full resume from step 30: %s\n",
                same ? "bitwise the uninterrupted run" : "DIFFERS");
    ok &= same;

    // 2. Model-only resume into an optimizer that trained elsewhere (5 steps: its masters
    //    hold weights far worse than the loaded ones).
    Model other, stale;
    for (Model* m : {&other, &stale}) {
      m->train(5);
      m->set_weights(saved);
    }
    other.opt.reload_model_params();  // the documented path
    const double loaded = other.backward();
    other.train(1);
    stale.train(1);  // no reload: the step writes back the stale masters
    const double after = other.backward(), after_stale = stale.backward();
    std::printf(
        "model-only resume: loss %.4g at the loaded weights, %.4g one step later "
        "(%.4g without reload_model_params)\n",
        loaded, after, after_stale);
    ok &= after <= loaded && after_stale > loaded;
  }
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
