// The bad-input matrix: every public entry point of the C++ interface with each kind of bad
// argument. Each row must throw the named kopt::Error subclass with a message naming the
// argument, and leave the optimizer exactly as its twin that never saw the call (full state
// snapshot), and both must then train on alike (nothing half-bound either).
#include <cmath>
#include <functional>
#include <limits>

#include "state_snapshot.hpp"
#include "test_support.hpp"

namespace {
namespace test_bad_input_matrix {

using namespace kopt_test;
using kopt::DType;
using kopt::Tensor;

enum class Kind { invalid, shape, not_compiled, checkpoint };

struct Row {
  const char* what;
  Kind kind;
  const char* needle;  ///< part of the message: names the argument
  std::function<void(CheckpointModel&)> call;
};

std::unique_ptr<CheckpointModel> make_model() {
  auto m = std::make_unique<CheckpointModel>(
      std::vector<ParamDef>{{0, DType::f32, DType::f32, false, 13},
                            {0, DType::bf16, DType::bf16, false, 29},
                            {0, DType::f16, DType::f32, true, 40}},
      std::vector<kopt::AdamConfig>{kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true},
                                    kopt::AdamConfig{.weight_decay = 0}},
      std::vector<std::size_t>{0, 1, 2}, std::vector<std::size_t>{0, 1, 2},
      kopt::HybridOptions{.max_grad_norm = 1.0, .loss_scaling = kopt::LossScalerOptions{}},
      std::vector<bool>{false, false, true});
  m->train(0, 2);
  return m;
}

void expect_kind(Kind kind, const std::function<void()>& call, const std::string& needle) {
  switch (kind) {
    case Kind::invalid:
      return expect_error<kopt::InvalidArgument>(call, needle);
    case Kind::shape:
      return expect_error<kopt::ShapeMismatch>(call, needle);
    case Kind::not_compiled:
      return expect_error<kopt::NotCompiled>(call, needle);
    case Kind::checkpoint:
      return expect_error<kopt::CheckpointError>(call, needle);
  }
}

// Memory the rows point tensors at: valid, so only the argument under test is bad.
std::vector<float> scratch(64, 0.5f);
Tensor f32(std::int64_t n) { return Tensor(scratch.data(), n, DType::f32); }

// Changes a group's config, steps, and puts the config back whatever happens.
void step_with(CheckpointModel& m, std::size_t g, const std::function<void(kopt::AdamConfig&)>& f) {
  kopt::AdamConfig& c = m.opt->group(g).config();
  const kopt::AdamConfig saved = c;
  f(c);
  try {
    m.opt->step();
  } catch (...) {
    c = saved;
    throw;
  }
  c = saved;
}

// A group with one good param, to which a row adds a bad one: the group must not change.
void add_to_group(const std::string& name, const Tensor& param, const Tensor& grad = Tensor{}) {
  kopt::ParamGroup g;
  g.add("good", f32(4), f32(4));
  try {
    g.add(name, param, grad);
  } catch (...) {
    EXPECT_EQ(g.params().size(), 1u);
    throw;
  }
}

void build(const std::vector<std::pair<std::string, Tensor>>& params,
           const kopt::HybridOptions& options = {}) {
  kopt::ParamGroup g;
  for (const auto& [name, t] : params) g.add(name, t, t);
  kopt::HybridOptimizer opt({g}, options);
}

Tensor sharded(std::int64_t numel, std::int64_t offset, std::int64_t global) {
  Tensor t = f32(numel);
  t.global_numel = global;  // set by hand, as a framework's shard metadata would be
  t.global_offset = offset;
  return t;
}

const std::int64_t kHuge = std::numeric_limits<std::int64_t>::max() / 2;

std::vector<Row> rows() {
  using M = CheckpointModel;
  return {
      // ParamGroup
      {"ParamGroup::add null param", Kind::invalid, "param of 'w' is a null pointer with numel 5",
       [](M&) { add_to_group("w", Tensor(nullptr, 5, DType::f32)); }},
      {"ParamGroup::add null grad", Kind::invalid, "grad of 'w' is a null pointer with numel 4",
       [](M&) { add_to_group("w", f32(4), Tensor(nullptr, 4, DType::f32)); }},
      {"ParamGroup::add negative numel", Kind::invalid, "param of 'w' has negative numel -3",
       [](M&) { add_to_group("w", f32(-3)); }},
      {"ParamGroup::add numel * sizeof overflows", Kind::invalid, "overflows",
       [](M&) { add_to_group("w", Tensor(scratch.data(), kHuge, DType::f32)); }},
      {"ParamGroup::add unsupported dtype", Kind::invalid, "param of 'w' has dtype f64",
       [](M&) { add_to_group("w", Tensor(scratch.data(), 4, DType::f64)); }},
      {"ParamGroup::add empty name", Kind::invalid, "non-empty name",
       [](M&) { add_to_group("", f32(4)); }},
      {"ParamGroup::add duplicate name", Kind::invalid, "'good' is already in this group",
       [](M&) { add_to_group("good", f32(4)); }},
      {"ParamGroup::add shard past its global tensor", Kind::invalid,
       "global_offset + numel > global_numel", [](M&) { add_to_group("w", sharded(5, 8, 10)); }},
      {"ParamGroup::add negative shard offset", Kind::invalid, "global_offset + numel",
       [](M&) { add_to_group("w", sharded(5, -1, 10)); }},
      {"ParamGroup bad config", Kind::invalid, "beta1 = 1",
       [](M&) { kopt::ParamGroup g(kopt::AdamConfig{.beta1 = 1.0}); }},
      {"ParamGroup bad placement", Kind::invalid, "StatePlacement 7",
       [](M&) { kopt::ParamGroup g(kopt::AdamConfig{}, static_cast<kopt::StatePlacement>(7)); }},
      // Tensor
      {"Tensor::shard_of past the end", Kind::invalid, "do not fit",
       [](M&) { (void)f32(5).shard_of(10, 8); }},
      {"Tensor::slice past the end", Kind::invalid, "slice(3, 4)",
       [](M&) { (void)f32(5).slice(3, 4); }},
      // HybridOptimizer construction
      {"HybridOptimizer duplicate names across groups", Kind::invalid, "'a' is used twice",
       [](M&) {
         std::vector<kopt::ParamGroup> g(2);
         g[0].add("a", f32(4));
         g[1].add("a", f32(4));
         kopt::HybridOptimizer opt(g);
       }},
      {"HybridOptimizer memory space not compiled", Kind::not_compiled, "memory space 'cuda'",
       [](M&) {
#ifdef KOKKOS_ENABLE_CUDA
         throw kopt::NotCompiled("skipped: this build has CUDA: memory space 'cuda'");
#else
         build({{"a", Tensor(scratch.data(), 4, DType::f32, kopt::MemorySpace::cuda)}});
#endif
       }},
      {"HybridOptimizer grad size mismatch", Kind::shape, "grad of 'a' has 5 elements",
       [](M&) {
         kopt::ParamGroup g;
         g.add("a", f32(4), f32(5));
         kopt::HybridOptimizer opt({g});
       }},
      {"HybridOptions.max_grad_norm NaN", Kind::invalid, "max_grad_norm = nan",
       [](M&) {
         build({{"a", f32(4)}}, {.max_grad_norm = NAN});
       }},
      {"HybridOptions.max_grad_norm negative", Kind::invalid, "max_grad_norm = -1",
       [](M&) {
         build({{"a", f32(4)}}, {.max_grad_norm = -1.0});
       }},
      {"LossScalerOptions.init_scale inf", Kind::invalid, "init_scale = inf",
       [](M&) {
         build({{"a", f32(4)}}, {.loss_scaling = kopt::LossScalerOptions{.init_scale = INFINITY}});
       }},
      {"LossScalerOptions.growth_interval 0", Kind::invalid, "growth_interval = 0",
       [](M&) {
         build({{"a", f32(4)}}, {.loss_scaling = kopt::LossScalerOptions{.growth_interval = 0}});
       }},
      {"OffloadOptions.fraction 2", Kind::invalid, "fraction = 2",
       [](M&) {
         build({{"a", f32(4)}}, {.offload = kopt::OffloadOptions{.fraction = 2.0}});
       }},
      {"ShardingOptions without communicator", Kind::invalid, "communicator is required",
       [](M&) {
         build({{"a", f32(4)}}, {.sharding = kopt::ShardingOptions{}});
       }},
      {"HybridOptimizer shard without sharding", Kind::invalid, "set HybridOptions::sharding",
       [](M&) {
         build({{"a", sharded(4, 0, 10)}});
       }},
      {"HybridOptimizer huge numel", Kind::invalid, "overflows",
       [](M&) {
         Tensor t = f32(4);
         kopt::ParamGroup g;
         g.add("a", t);
         std::vector<kopt::ParamGroup> groups{g};
         // ParamGroup::add checked it; a numel changed afterwards is caught again here.
         const_cast<Tensor&>(groups[0].params()[0].param).numel = kHuge;
         kopt::HybridOptimizer opt(groups);
       }},
      // HybridOptimizer calls on a live optimizer
      {"group() out of range", Kind::invalid, "group 3 does not exist",
       [](M& m) { (void)m.opt->group(3); }},
      {"set_grad unknown name", Kind::invalid, "no parameter named 'nope'",
       [](M& m) { m.opt->set_grad("nope", f32(13)); }},
      {"set_grad empty name", Kind::invalid, "no parameter named ''",
       [](M& m) { m.opt->set_grad("", f32(13)); }},
      {"set_grad wrong size", Kind::shape, "has 12 elements",
       [](M& m) { m.opt->set_grad("p0", f32(12)); }},
      {"set_grad unsupported dtype", Kind::invalid, "has dtype i32",
       [](M& m) { m.opt->set_grad("p0", Tensor(scratch.data(), 13, DType::i32)); }},
      {"set_grad null with numel", Kind::invalid, "null pointer with numel 13",
       [](M& m) { m.opt->set_grad("p0", Tensor(nullptr, 13, DType::f32)); }},
      {"set_grad huge numel", Kind::invalid, "overflows",
       [](M& m) { m.opt->set_grad("p0", Tensor(scratch.data(), kHuge, DType::f32)); }},
      {"rebind unknown name", Kind::invalid, "no parameter named 'nope'",
       [](M& m) { m.opt->rebind("nope", f32(13), f32(13)); }},
      {"rebind to another size", Kind::shape, "to 12 elements",
       [](M& m) { m.opt->rebind("p0", f32(12), f32(12)); }},
      {"rebind to another dtype", Kind::invalid, "to dtype bf16",
       [](M& m) { m.opt->rebind("p0", Tensor(scratch.data(), 13, DType::bf16), Tensor{}); }},
      {"rebind null param", Kind::invalid, "null pointer with numel 13",
       [](M& m) { m.opt->rebind("p0", Tensor(nullptr, 13, DType::f32), f32(13)); }},
      {"rebind grad of another size", Kind::shape, "has 7 elements",
       [](M& m) { m.opt->rebind("p0", f32(13), f32(7)); }},
      {"step with lr NaN", Kind::invalid, "group 1: AdamConfig.lr = nan",
       [](M& m) { step_with(m, 1, [](kopt::AdamConfig& c) { c.lr = NAN; }); }},
      {"step with beta2 1.5", Kind::invalid, "beta2 = 1.5",
       [](M& m) { step_with(m, 0, [](kopt::AdamConfig& c) { c.beta2 = 1.5; }); }},
      {"step with eps 0", Kind::invalid, "eps = 0",
       [](M& m) { step_with(m, 2, [](kopt::AdamConfig& c) { c.eps = 0; }); }},
      {"step with weight_decay inf", Kind::invalid, "weight_decay = inf",
       [](M& m) { step_with(m, 0, [](kopt::AdamConfig& c) { c.weight_decay = INFINITY; }); }},
      {"step_count unknown name", Kind::invalid, "no parameter named 'nope'",
       [](M& m) { (void)m.opt->step_count("nope"); }},
      {"is_offloaded unknown name", Kind::invalid, "no parameter named 'nope'",
       [](M& m) { (void)m.opt->is_offloaded("nope"); }},
      {"load from a missing directory", Kind::checkpoint, "/nonexistent/kopt/index.kopt",
       [](M& m) { m.opt->load("/nonexistent/kopt"); }},
      {"load a corrupt index", Kind::checkpoint, "index.kopt",
       [](M& m) {
         TempDir dir;
         m.opt->save(dir.str());
         auto bytes = read_bytes(dir.path / "index.kopt");
         bytes[bytes.size() / 2] ^= 0x40;
         std::ofstream(dir.path / "index.kopt", std::ios::binary)
             .write(reinterpret_cast<const char*>(bytes.data()),
                    static_cast<std::streamsize>(bytes.size()));
         m.opt->load(dir.str());
       }},
      {"load another model's checkpoint", Kind::checkpoint, "has no param 'p0'",
       [](M& m) {
         TempDir dir;
         kopt::ParamGroup g;
         g.add("other", f32(8), Tensor(scratch.data() + 8, 8, DType::f32));
         kopt::HybridOptimizer other({g});
         other.step();
         other.save(dir.str());
         m.opt->load(dir.str());
       }},
      {"save over a regular file", Kind::checkpoint, "not-a-directory",
       [](M& m) {
         TempDir dir;
         std::ofstream(dir.path / "not-a-directory") << "x";
         m.opt->save(dir.str("not-a-directory"));
       }},
      // The pieces a sharded optimizer is built from
      {"ShardLayout world size 0", Kind::invalid, "world_size",
       [](M&) {
         kopt::ShardLayout l({4, 5}, 0);
       }},
      {"ShardLayout negative numel", Kind::invalid, "-2",
       [](M&) {
         kopt::ShardLayout l({4, -2}, 2);
       }},
      {"ShardLayout rank out of range", Kind::invalid, "rank 2",
       [](M&) {
         (void)kopt::ShardLayout({4, 5}, 2).segments(2);
       }},
      {"LossScaler restore negative scale", Kind::invalid, "-1",
       [](M&) { kopt::LossScaler().restore(-1.0, 0); }},
  };
}

TEST(BadInputMatrix, EveryRowThrowsItsErrorNamingTheArgumentAndChangesNothing) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.what);
    auto model = make_model(), twin = make_model();
    expect_kind(
        row.kind, [&] { row.call(*model); }, row.needle);
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
    model->train(2, 1);
    twin->train(2, 1);
    EXPECT_TRUE(take_snapshot(*model) == take_snapshot(*twin));
  }
}

}  // namespace test_bad_input_matrix
}  // namespace
