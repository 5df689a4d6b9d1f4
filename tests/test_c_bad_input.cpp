// The bad-input matrix of the C interface: each row gets its kopt_status and a
// kopt_last_error() naming the argument, and the optimizer is exactly as its twin that never
// saw the call (params, step counts, loss scale, configs, every state array via kopt_save).
#include <kopt/kopt.h>

#include <cmath>
#include <functional>
#include <limits>

#include "state_snapshot.hpp"
#include "test_support.hpp"

namespace {
namespace test_c_bad_input {

using namespace kopt_test;

// Three params: f32 and bf16 in two groups, and an f32 one in an offloaded group.
struct CModel {
  std::vector<Buffer> params, grads;
  kopt_optimizer* opt = nullptr;
  static constexpr const char* names[] = {"w", "b", "o"};
  static constexpr kopt_dtype dtypes[] = {KOPT_F32, KOPT_BF16, KOPT_F32};
  static constexpr std::size_t sizes[] = {13, 29, 40};

  CModel() {
    kopt_groups* groups = nullptr;
    EXPECT_EQ(kopt_groups_create(&groups), KOPT_OK);
    kopt_adam_config c;
    kopt_adam_config_default(&c);
    for (int g = 0; g < 3; ++g) {
      c.amsgrad = g == 1;
      EXPECT_EQ(kopt_groups_add_group(groups, &c, g == 2, nullptr), KOPT_OK);
    }
    for (std::size_t j = 0; j < 3; ++j) {
      const auto dt = static_cast<kopt::DType>(dtypes[j]);
      params.emplace_back(dt, false, sizes[j]);
      grads.emplace_back(dt, false, sizes[j]);
      params[j].set(std::vector<double>(sizes[j], 0.25 * static_cast<double>(j + 1)));
      EXPECT_EQ(kopt_groups_add_param(groups, j, names[j], params[j].host.data(), dtypes[j],
                                      grads[j].host.data(), dtypes[j],
                                      static_cast<std::int64_t>(sizes[j]), KOPT_HOST),
                KOPT_OK)
          << kopt_last_error();
    }
    kopt_options o;
    kopt_options_default(&o);
    o.max_grad_norm = 1.0;
    o.loss_scaling = 1;
    EXPECT_EQ(kopt_optimizer_create(groups, &o, &opt), KOPT_OK) << kopt_last_error();
    kopt_groups_destroy(groups);
    train(0, 2);
  }
  ~CModel() { kopt_optimizer_destroy(opt); }
  CModel(const CModel&) = delete;
  CModel& operator=(const CModel&) = delete;

  void train(int first, int steps) {
    double scale = 0;
    for (int s = first; s < first + steps; ++s) {
      EXPECT_EQ(kopt_loss_scale(opt, &scale), KOPT_OK);
      for (std::size_t j = 0; j < 3; ++j) {
        std::vector<double> g(sizes[j]);
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = scale * std::sin(0.1 * static_cast<double>(i + 7 * j + 31 * s));
        grads[j].set(g);
      }
      EXPECT_EQ(kopt_step(opt, nullptr), KOPT_OK) << kopt_last_error();
    }
  }
  Snapshot snapshot() {
    Snapshot s;
    for (std::size_t j = 0; j < 3; ++j) {
      s.params.push_back(params[j].get());
      std::int64_t count = -1;
      EXPECT_EQ(kopt_step_count(opt, names[j], &count), KOPT_OK);
      s.steps.push_back(count);
    }
    EXPECT_EQ(kopt_loss_scale(opt, &s.loss_scale), KOPT_OK);
    for (std::size_t g = 0; g < 3; ++g) {
      kopt_adam_config c;
      EXPECT_EQ(kopt_get_config(opt, g, &c), KOPT_OK);
      s.configs.push_back(kopt::AdamConfig{c.lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                           c.decoupled != 0, c.amsgrad != 0, c.bias_correction != 0,
                                           c.maximize != 0});
    }
    TempDir dir;
    EXPECT_EQ(kopt_save(opt, dir.str().c_str()), KOPT_OK) << kopt_last_error();
    s.state = saved_state(dir.path);
    return s;
  }
};

struct Row {
  const char* what;
  kopt_status status;
  const char* needle;
  std::function<kopt_status(kopt_optimizer*)> call;
};

float memory[64];
const std::int64_t kHuge = std::numeric_limits<std::int64_t>::max() / 2;

kopt_adam_config default_config() {
  kopt_adam_config c;
  kopt_adam_config_default(&c);
  return c;
}

// Building blocks with one bad argument each, on a fresh kopt_groups.
kopt_status add_param(const char* name, void* param, kopt_dtype dtype, std::int64_t numel,
                      kopt_memory_space space = KOPT_HOST, std::size_t group = 0) {
  kopt_groups* groups = nullptr;
  kopt_groups_create(&groups);
  const kopt_adam_config c = default_config();
  kopt_groups_add_group(groups, &c, 0, nullptr);
  const kopt_status s =
      kopt_groups_add_param(groups, group, name, param, dtype, nullptr, dtype, numel, space);
  kopt_groups_destroy(groups);
  return s;
}

kopt_status create_with(const kopt_options& o) {
  kopt_groups* groups = nullptr;
  kopt_groups_create(&groups);
  const kopt_adam_config c = default_config();
  kopt_groups_add_group(groups, &c, 0, nullptr);
  kopt_groups_add_param(groups, 0, "a", memory, KOPT_F32, memory + 8, KOPT_F32, 4, KOPT_HOST);
  kopt_optimizer* opt = nullptr;
  const kopt_status s = kopt_optimizer_create(groups, &o, &opt);
  EXPECT_EQ(opt, nullptr);  // untouched on failure
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);
  return s;
}

kopt_options options_with(const std::function<void(kopt_options&)>& f) {
  kopt_options o;
  kopt_options_default(&o);
  f(o);
  return o;
}

kopt_adam_config config_with(const std::function<void(kopt_adam_config&)>& f) {
  kopt_adam_config c = default_config();
  f(c);
  return c;
}

std::vector<Row> rows() {
  using O = kopt_optimizer*;
  const kopt_status invalid = KOPT_ERROR_INVALID_ARGUMENT, shape = KOPT_ERROR_SHAPE_MISMATCH;
  return {
      {"groups_create NULL", invalid, "groups is NULL",
       [](O) { return kopt_groups_create(nullptr); }},
      {"add_group NULL groups", invalid, "groups is NULL",
       [](O) {
         const kopt_adam_config c = default_config();
         return kopt_groups_add_group(nullptr, &c, 0, nullptr);
       }},
      {"add_group NULL config", invalid, "config is NULL",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_status s = kopt_groups_add_group(g, nullptr, 0, nullptr);
         kopt_groups_destroy(g);
         return s;
       }},
      {"add_group host_state 2", invalid, "host_state = 2",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         const kopt_status s = kopt_groups_add_group(g, &c, 2, nullptr);
         kopt_groups_destroy(g);
         return s;
       }},
      {"add_group amsgrad 5", invalid, "config.amsgrad = 5",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = config_with([](kopt_adam_config& x) { x.amsgrad = 5; });
         const kopt_status s = kopt_groups_add_group(g, &c, 0, nullptr);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_master NULL groups", invalid, "groups is NULL",
       [](O) { return kopt_groups_set_master(nullptr, 0, "remainder"); }},
      {"set_master NULL master", invalid, "master is NULL",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         kopt_groups_add_group(g, &c, 0, nullptr);
         const kopt_status s = kopt_groups_set_master(g, 0, nullptr);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_master unknown form", invalid, "master 'fp8' is none of",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         kopt_groups_add_group(g, &c, 0, nullptr);
         const kopt_status s = kopt_groups_set_master(g, 0, "fp8");
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_rounding NULL groups", invalid, "groups is NULL",
       [](O) { return kopt_groups_set_rounding(nullptr, 0, "nearest", 0); }},
      {"set_rounding NULL rounding", invalid, "rounding is NULL",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         kopt_groups_add_group(g, &c, 0, nullptr);
         const kopt_status s = kopt_groups_set_rounding(g, 0, nullptr, 0);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_rounding unknown group", invalid, "group 0 does not exist",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_status s = kopt_groups_set_rounding(g, 0, "nearest", 0);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_state_rounding NULL groups", invalid, "groups is NULL",
       [](O) { return kopt_groups_set_state_rounding(nullptr, 0, "nearest", 0); }},
      {"set_state_rounding unknown group", invalid, "group 0 does not exist",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_status s = kopt_groups_set_state_rounding(g, 0, "stochastic", 1);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_state_rounding f32 state", invalid, "every state array f32",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         kopt_groups_add_group(g, &c, 0, nullptr);
         const kopt_status s = kopt_groups_set_state_rounding(g, 0, "stochastic", 1);
         kopt_groups_destroy(g);
         return s;
       }},
      {"set_master unknown group", invalid, "group 0 does not exist",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_status s = kopt_groups_set_master(g, 0, "f32");
         kopt_groups_destroy(g);
         return s;
       }},
      {"add_param NULL name", invalid, "name is NULL",
       [](O) { return add_param(nullptr, memory, KOPT_F32, 4); }},
      {"add_param empty name", invalid, "non-empty name",
       [](O) { return add_param("", memory, KOPT_F32, 4); }},
      {"add_param NULL param", invalid, "param 'a' is NULL",
       [](O) { return add_param("a", nullptr, KOPT_F32, 4); }},
      {"add_param negative numel", invalid, "negative numel -4",
       [](O) { return add_param("a", memory, KOPT_F32, -4); }},
      {"add_param numel * sizeof overflows", invalid, "overflows",
       [](O) { return add_param("a", memory, KOPT_F32, kHuge); }},
      {"add_param bad dtype", invalid, "dtype 9",
       [](O) { return add_param("a", memory, static_cast<kopt_dtype>(9), 4); }},
      {"add_param bad memory space", invalid, "memory space 42",
       [](O) { return add_param("a", memory, KOPT_F32, 4, static_cast<kopt_memory_space>(42)); }},
      {"add_param unknown group", invalid, "group 3 does not exist",
       [](O) { return add_param("a", memory, KOPT_F32, 4, KOPT_HOST, 3); }},
#ifndef KOKKOS_ENABLE_CUDA
      {"optimizer_create memory space not compiled", KOPT_ERROR_NOT_COMPILED, "memory space 'cuda'",
       [](O) {
         kopt_groups* g = nullptr;
         kopt_groups_create(&g);
         const kopt_adam_config c = default_config();
         kopt_groups_add_group(g, &c, 0, nullptr);
         kopt_groups_add_param(g, 0, "a", memory, KOPT_F32, nullptr, KOPT_F32, 4, KOPT_CUDA);
         kopt_optimizer* opt = nullptr;
         const kopt_status s = kopt_optimizer_create(g, nullptr, &opt);
         kopt_groups_destroy(g);
         return s;
       }},
#endif
      {"optimizer_create NULL groups", invalid, "groups is NULL",
       [](O) {
         kopt_optimizer* opt = nullptr;
         return kopt_optimizer_create(nullptr, nullptr, &opt);
       }},
      {"optimizer_create max_grad_norm NaN", invalid, "max_grad_norm is NaN",
       [](O) { return create_with(options_with([](kopt_options& o) { o.max_grad_norm = NAN; })); }},
      {"optimizer_create init_scale NaN", invalid, "init_scale is NaN",
       [](O) {
         return create_with(options_with([](kopt_options& o) {
           o.loss_scaling = 1;
           o.init_scale = NAN;
         }));
       }},
      {"optimizer_create init_scale inf", invalid, "init_scale = inf",
       [](O) {
         return create_with(options_with([](kopt_options& o) {
           o.loss_scaling = 1;
           o.init_scale = INFINITY;
         }));
       }},
      {"optimizer_create loss_scaling 3", invalid, "options.loss_scaling = 3",
       [](O) { return create_with(options_with([](kopt_options& o) { o.loss_scaling = 3; })); }},
      {"step NULL optimizer", invalid, "optimizer is NULL",
       [](O) { return kopt_step(nullptr, nullptr); }},
      {"get_config unknown group", invalid, "group 7 does not exist",
       [](O o) {
         kopt_adam_config c;
         return kopt_get_config(o, 7, &c);
       }},
      {"get_config NULL config", invalid, "config is NULL",
       [](O o) { return kopt_get_config(o, 0, nullptr); }},
      {"set_config beta1 -0.1", invalid, "beta1 = -0.1",
       [](O o) {
         const kopt_adam_config c = config_with([](kopt_adam_config& x) { x.beta1 = -0.1; });
         return kopt_set_config(o, 0, &c);
       }},
      {"set_config maximize -1", invalid, "config.maximize = -1",
       [](O o) {
         const kopt_adam_config c = config_with([](kopt_adam_config& x) { x.maximize = -1; });
         return kopt_set_config(o, 0, &c);
       }},
      {"set_config unknown group", invalid, "group 3 does not exist",
       [](O o) {
         const kopt_adam_config c = default_config();
         return kopt_set_config(o, 3, &c);
       }},
      {"set_lr NaN", invalid, "lr = nan", [](O o) { return kopt_set_lr(o, 1, NAN); }},
      {"set_lr negative", invalid, "lr = -0.001", [](O o) { return kopt_set_lr(o, 1, -1e-3); }},
      {"set_lr unknown group", invalid, "group 3 does not exist",
       [](O o) { return kopt_set_lr(o, 3, 1e-3); }},
      {"set_grad unknown name", invalid, "no parameter named 'nope'",
       [](O o) { return kopt_set_grad(o, "nope", memory, KOPT_F32, 13, KOPT_HOST); }},
      {"set_grad NULL name", invalid, "name is NULL",
       [](O o) { return kopt_set_grad(o, nullptr, memory, KOPT_F32, 13, KOPT_HOST); }},
      {"set_grad wrong numel", shape, "has 12 elements",
       [](O o) { return kopt_set_grad(o, "w", memory, KOPT_F32, 12, KOPT_HOST); }},
      {"set_grad bad dtype", invalid, "dtype -1",
       [](O o) {
         return kopt_set_grad(o, "w", memory, static_cast<kopt_dtype>(-1), 13, KOPT_HOST);
       }},
      {"set_grad huge numel", invalid, "overflows",
       [](O o) { return kopt_set_grad(o, "w", memory, KOPT_F32, kHuge, KOPT_HOST); }},
      {"rebind NULL param", invalid, "param is NULL",
       [](O o) { return kopt_rebind(o, "w", nullptr, KOPT_F32, memory, KOPT_F32, 13, KOPT_HOST); }},
      {"rebind other numel", shape, "to 14 elements",
       [](O o) { return kopt_rebind(o, "w", memory, KOPT_F32, nullptr, KOPT_F32, 14, KOPT_HOST); }},
      {"rebind other dtype", invalid, "to dtype f16",
       [](O o) { return kopt_rebind(o, "w", memory, KOPT_F16, nullptr, KOPT_F16, 13, KOPT_HOST); }},
      {"save NULL path", invalid, "path is NULL", [](O o) { return kopt_save(o, nullptr); }},
      {"load NULL path", invalid, "path is NULL", [](O o) { return kopt_load(o, nullptr, 0); }},
      {"save over a file", KOPT_ERROR_CHECKPOINT, "not-a-directory",
       [](O o) {
         TempDir dir;
         std::ofstream(dir.path / "not-a-directory") << "x";
         return kopt_save(o, dir.str("not-a-directory").c_str());
       }},
      {"load missing directory", KOPT_ERROR_CHECKPOINT, "/nonexistent/kopt",
       [](O o) { return kopt_load(o, "/nonexistent/kopt", 0); }},
      {"load partial 2", invalid, "partial = 2",
       [](O o) {
         TempDir dir;
         EXPECT_EQ(kopt_save(o, dir.str().c_str()), KOPT_OK);
         return kopt_load(o, dir.str().c_str(), 2);
       }},
      {"loss_scale NULL out", invalid, "scale is NULL",
       [](O o) { return kopt_loss_scale(o, nullptr); }},
      {"step_count unknown name", invalid, "no parameter named 'nope'",
       [](O o) {
         std::int64_t n = 0;
         return kopt_step_count(o, "nope", &n);
       }},
      {"step_count NULL out", invalid, "count is NULL",
       [](O o) { return kopt_step_count(o, "w", nullptr); }},
      {"finalize with a live optimizer", invalid, "kopt_optimizer_destroy them first",
       [](O) { return kopt_finalize(); }},
  };
}

TEST(CApiBadInputMatrix, EveryRowGetsItsStatusAMessageNamingTheArgumentAndChangesNothing) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.what);
    CModel model, twin;
    EXPECT_EQ(row.call(model.opt), row.status) << kopt_last_error();
    EXPECT_NE(std::string(kopt_last_error()).find(row.needle), std::string::npos)
        << kopt_last_error();
    EXPECT_TRUE(model.snapshot() == twin.snapshot());
    model.train(2, 1);
    twin.train(2, 1);
    EXPECT_TRUE(model.snapshot() == twin.snapshot());
  }
}

}  // namespace test_c_bad_input
}  // namespace
