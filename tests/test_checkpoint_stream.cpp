// Checkpoints move state a bounded span at a time (src/checkpoint_stream.cpp): the span is
// invisible in the files and in what loads, and the host memory a save or a load takes
// beyond the optimizer's own stays under its documented bound whatever the state's size.
#include <gtest/gtest.h>

#include <fstream>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>
#include <string>

#include "state_snapshot.hpp"

namespace {
namespace test_checkpoint_stream {

using kopt_test::CheckpointModel;
using kopt_test::ParamDef;
using kopt_test::TempDir;

struct SpanFloats {
  explicit SpanFloats(std::int64_t n) { kopt::Impl::set_checkpoint_span_floats(n); }
  ~SpanFloats() { kopt::Impl::set_checkpoint_span_floats(0); }
};

// Amsgrad (a max array) in group 1, group 2 offloaded; f32, bf16 and f16 params of 1 to
// 8199 elements.
CheckpointModel model(std::vector<ParamDef> defs = kopt_test::mixed_defs(2)) {
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 2};
  const std::vector<std::size_t> groups_of = {0, 1, 2, 0, 1, 2, 0, 1};
  std::vector<std::size_t> order(defs.size());
  for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
  return CheckpointModel(
      std::move(defs),
      {kopt::AdamConfig{}, kopt::AdamConfig{.lr = 3e-3, .amsgrad = true},
       kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.0}},
      std::vector<std::size_t>(groups_of.begin(), groups_of.begin() + order.size()), order, o,
      {false, false, true});
}

// Trained, then new weights written into two 16-bit params and not yet taken up: their
// masters are saved as their next update would reconcile them.
void train_and_reweight(CheckpointModel& m) {
  m.train(0, 3);
  for (const std::size_t j : {1u, 2u}) {
    std::vector<double> w = m.params[j].get();
    for (std::size_t k = 0; k < w.size(); k += 3) w[k] *= 1.5;
    m.params[j].set(w);
  }
  m.opt->reload_model_params();
}

TEST(CheckpointStream, TheSpanChangesNeitherTheFilesNorWhatLoads) {
  CheckpointModel a = model();
  train_and_reweight(a);
  const kopt_test::Snapshot reference = kopt_test::take_snapshot(a);
  for (const std::int64_t span : {1, 7, 1000}) {
    SCOPED_TRACE("span of " + std::to_string(span) + " floats");
    TempDir dir;
    CheckpointModel b = model();
    b.copy_params_from(a);
    {
      const SpanFloats spans(span);
      EXPECT_EQ(kopt_test::take_snapshot(a), reference);  // a save in spans: the same bytes
      a.opt->save(dir.str());
      b.opt->load(dir.str());  // and a load in spans
    }
    EXPECT_EQ(kopt_test::take_snapshot(b), reference);
    CheckpointModel c = model();  // resumes bitwise
    c.copy_params_from(a);
    c.opt->load(dir.str());
    b.train(3, 2);
    c.train(3, 2);
    b.expect_same(c);
  }
}

// Kibibytes of /proc/self/status's `field` ("VmRSS", "VmHWM"); -1 if absent.
long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// Resets the peak resident size (VmHWM) to the current one (Linux >= 4.0).
bool reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good() && status_kib("VmHWM") >= 0;
}

// Extra resident kibibytes at the peak of `f`.
template <class F>
long peak_extra_kib(F&& f) {
  const long before = status_kib("VmRSS");
  f();
  return status_kib("VmHWM") - before;
}

TEST(CheckpointStream, HostMemoryBeyondTheStateIsBounded) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer keeps freed memory resident";
#endif
  if (!reset_peak()) GTEST_SKIP() << "no /proc/self/clear_refs to reset the peak with";
  // bf16 params with fp32 masters and an amsgrad max: 16 B of state per element, 160 MiB
  // in all, in one big param per engine (a host one and an offloaded one).
  const std::size_t big = (std::size_t{1} << 23) + 5, offloaded = (std::size_t{1} << 21) + 3;
  const std::vector<ParamDef> defs = {{0, kopt::DType::bf16, kopt::DType::bf16, false, 7},
                                      {1, kopt::DType::bf16, kopt::DType::bf16, false, big},
                                      {2, kopt::DType::bf16, kopt::DType::bf16, true, offloaded}};
  const double state_mib = 16.0 * (big + offloaded) / (1 << 20);
  const long bound_kib = 3 * kopt::Impl::kCheckpointIoBytes / 1024 + 4096;  // + the index
  TempDir dir;
  CheckpointModel a = model(defs), b = model(defs);
  a.train(0, 2);
  b.train(0, 1);  // its state allocated and touched, as a's: what load() adds is the stream's
  a.opt->reload_model_params();
  ASSERT_TRUE(reset_peak());
  const long save_kib = peak_extra_kib([&] { a.opt->save(dir.str()); });
  b.copy_params_from(a);
  ASSERT_TRUE(reset_peak());
  const long load_kib = peak_extra_kib([&] { b.opt->load(dir.str()); });
  RecordProperty("save_extra_kib", std::to_string(save_kib));
  RecordProperty("load_extra_kib", std::to_string(load_kib));
  EXPECT_LE(save_kib, bound_kib) << "save() took " << save_kib / 1024 << " MiB for " << state_mib
                                 << " MiB of state";
  EXPECT_LE(load_kib, bound_kib) << "load() took " << load_kib / 1024 << " MiB for " << state_mib
                                 << " MiB of state";
  a.train(2, 1);
  b.train(2, 1);
  a.expect_same(b);
}

}  // namespace test_checkpoint_stream
}  // namespace
