// Kokkos Tools see kopt's step, save and load as named regions, balanced on every exit path:
// a load that throws pops its region too (an unbalanced push corrupts every later profile).
#include <gtest/gtest.h>

#include <kopt/kopt.hpp>
#include <string>
#include <vector>

#include "checkpoint_model.hpp"

namespace {
namespace test_profiling {

std::vector<std::string> events;  // "push <name>" and "pop", in order

void on_push(const char* name) { events.push_back(std::string("push ") + name); }
void on_pop() { events.emplace_back("pop"); }

// Installs the callbacks for the scope of a test.
struct RecordRegions {
  RecordRegions() {
    events.clear();
    Kokkos::Tools::Experimental::set_push_region_callback(on_push);
    Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
  }
  ~RecordRegions() {
    Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
    Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  }
};

// The regions `f` pushed, and whether its pushes and pops balance.
template <class F>
std::vector<std::string> regions_of(F&& f, bool& balanced) {
  events.clear();
  f();
  std::vector<std::string> pushed;
  long depth = 0;
  for (const std::string& e : events) {
    depth += e == "pop" ? -1 : 1;
    if (e != "pop") pushed.push_back(e.substr(5));
  }
  balanced = depth == 0;
  return pushed;
}

TEST(Profiling, StepSaveAndLoadAreBalancedRegionsEvenWhenTheyThrow) {
  kopt_test::TempDir dir;
  kopt::HybridOptions o;
  o.max_grad_norm = 1.0;
  kopt_test::CheckpointModel m(kopt_test::mixed_defs(1), {kopt::AdamConfig{}}, {0, 0, 0, 0},
                               {0, 1, 2, 3}, o);
  const RecordRegions recording;
  bool balanced = false;
  const auto first = [](const std::vector<std::string>& r) { return r.empty() ? "" : r[0]; };

  EXPECT_EQ(first(regions_of([&] { m.train(0, 1); }, balanced)), "kopt::HybridOptimizer::step");
  EXPECT_TRUE(balanced);
  EXPECT_EQ(first(regions_of([&] { m.opt->save(dir.str("ok")); }, balanced)),
            "kopt::HybridOptimizer::save");
  EXPECT_TRUE(balanced);
  EXPECT_EQ(first(regions_of([&] { m.opt->load(dir.str("ok")); }, balanced)),
            "kopt::HybridOptimizer::load");
  EXPECT_TRUE(balanced);
  const auto failing = [&] {
    EXPECT_THROW(m.opt->load(dir.str("missing")), kopt::CheckpointError);
  };
  EXPECT_EQ(first(regions_of(failing, balanced)), "kopt::HybridOptimizer::load");
  EXPECT_TRUE(balanced) << "a load that threw left its region pushed";
}

}  // namespace test_profiling
}  // namespace
