#pragma once
// The reference run the shape-aware algorithms' tests share (Muon, Adafactor): one fused
// optimizer with a group per config, one param per shape (a matrix, or a plain vector), random
// grads stepped 120 times beside a double-precision reference per param, with a grad scale of
// 0.5 every third step; after steps 1, 2 and 120 each param's check runs, with what every
// algorithm owes checked here: the step count, and a 16-bit param being its master rounded once.

#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

namespace kopt_test {

struct Shape {
  std::int64_t rows, cols;  // rows < 0: a vector of cols elements, no shape
  std::size_t numel() const { return static_cast<std::size_t>(rows < 0 ? cols : rows * cols); }
};

// fp32 values (held as doubles) uniform in [-1, 1).
inline std::vector<double> random_values(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(d(rng));
  return v;
}

// Reference(config, initial params, rows, cols) with update(grads, loss scale) and `param`.
template <class Space, class Policy, class Reference, class P, class G>
class ShapedRun {
 public:
  template <class Config>
  ShapedRun(const std::vector<Config>& configs, const std::vector<Shape>& shapes, unsigned seed,
            const std::string& label)
      : opt(Space(), configs.at(0), label), rng_(seed) {
    for (std::size_t g = 1; g < configs.size(); ++g) opt.add_group(configs[g]);
    for (std::size_t j = 0; j < shapes.size(); ++j) {
      const Shape s = shapes[j];
      const std::size_t n = s.numel();
      params_.push_back(std::make_unique<SpaceArray<P, Space>>(n));
      grads_.push_back(std::make_unique<SpaceArray<G, Space>>(n));
      const std::vector<double> p = random_values(rng_, n);
      for (std::size_t i = 0; i < n; ++i)
        params_[j]->host[i] = kopt::Impl::from_float<P>(static_cast<float>(p[i]));
      params_[j]->upload();
      const std::size_t group = (j + seed) % configs.size();
      refs.emplace_back(configs[group], widen(params_[j]->host), s.rows, s.cols);
      const kopt::Tensor t = params_[j]->tensor();
      opt.add(name(j), s.rows < 0 ? t : t.matrix(s.rows, s.cols), grads_[j]->tensor(), group);
    }
  }

  static std::string name(std::size_t j) { return "w" + std::to_string(j); }

  // `check(j, step, state, params)` for each param, params its master (or fp32 values),
  // after steps 1, 2 and 120; stops at the first step with a failure. An empty param gets
  // `check` with no params.
  template <class Check>
  void run(Check&& check) {
    SCOPED_TRACE(std::string("param ") + kopt::name_of(kopt::dtype_of<P>()) + ", grad " +
                 kopt::name_of(kopt::dtype_of<G>()));
    for (int step = 1; step <= 120; ++step) {
      const double scale = step % 3 == 0 ? 0.5 : 1.0;
      for (auto& grad : grads_) {
        const std::vector<double> g = random_values(rng_, grad->size());
        for (std::size_t i = 0; i < g.size(); ++i)
          grad->host[i] = kopt::Impl::from_float<G>(static_cast<float>(g[i]));
        grad->upload();
      }
      opt.step(scale);
      Kokkos::fence();
      for (std::size_t j = 0; j < grads_.size(); ++j) refs[j].update(widen(grads_[j]->host), scale);
      if (step != 1 && step != 2 && step != 120) continue;
      for (std::size_t j = 0; j < params_.size(); ++j) {
        SCOPED_TRACE(name(j) + " after step " + std::to_string(step));
        const auto state = opt.state(name(j));
        EXPECT_EQ(state.step, step);
        if constexpr (std::is_same_v<P, float>) {
          check(j, step, state, widen(params_[j]->download()));
        } else {  // the param is its master rounded once
          const std::vector<double> master = to_host(state.master);
          params_[j]->download();
          for (std::size_t i = 0; i < master.size(); ++i)
            ASSERT_EQ(params_[j]->host[i].bits, P::from_float(static_cast<float>(master[i])).bits)
                << i;
          check(j, step, state, master);
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }

  kopt::FusedOptimizer<Space, Policy> opt;
  std::vector<Reference> refs;

 private:
  std::mt19937 rng_;
  std::vector<std::unique_ptr<SpaceArray<P, Space>>> params_;
  std::vector<std::unique_ptr<SpaceArray<G, Space>>> grads_;
};

}  // namespace kopt_test
