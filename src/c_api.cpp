// The C interface (include/kopt/kopt.h): thin wrappers that turn every exception into a
// status and a thread-local message.
#include <kopt/kopt.h>

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/rank_agreement.hpp>
#include <memory>
#include <string>
#include <vector>

#include "c_api_support.hpp"

namespace {

using namespace kopt::c_api;
std::atomic<long> live_optimizers{0};  // kopt_finalize refuses while any exists
// Whether kopt_initialize started Kokkos: kopt_finalize ends only a Kokkos it started, not
// one the code (or another library in it) runs.
std::atomic<bool> started_kokkos{false};

std::string name_arg(const char* name) {
  KOPT_THROW_IF(name == nullptr, "kopt C API: name is NULL");
  return name;
}

kopt::MemorySpace space_of(kopt_memory_space s) {
  KOPT_THROW_IF(s < KOPT_HOST || s > KOPT_CUDA_HOST_PINNED,
                "kopt C API: memory space " << static_cast<int>(s) << " is unknown");
  return static_cast<kopt::MemorySpace>(s);
}

kopt::Tensor tensor(void* data, kopt_dtype dtype, std::int64_t numel, kopt_memory_space space) {
  if (data == nullptr) return kopt::Tensor{};  // a null grad
  return kopt::Tensor(data, numel, dtype_of(dtype), space_of(space));
}

// The C options as the C++ ones (NULL: the defaults).
kopt::HybridOptions options_of(const kopt_options* options) {
  kopt::HybridOptions o;
  if (options == nullptr) return o;
  KOPT_THROW_IF(std::isnan(options->max_grad_norm), "kopt C API: options.max_grad_norm is NaN");
  KOPT_THROW_IF(std::isnan(options->init_scale), "kopt C API: options.init_scale is NaN");
  if (options->max_grad_norm > 0) o.max_grad_norm = options->max_grad_norm;
  if (flag(options->loss_scaling, "options.loss_scaling"))
    o.loss_scaling = kopt::LossScalerOptions{
        .init_scale = options->init_scale > 0 ? options->init_scale : 65536.0};
  return o;
}

void create(const kopt_groups* groups, const kopt::HybridOptions& options,
            kopt_optimizer** optimizer) {
  const auto& g = deref(groups, "groups");
  auto& out = deref(optimizer, "optimizer");
  auto created = std::make_unique<kopt_optimizer>();
  created->opt = std::make_unique<kopt::HybridOptimizer>(g.groups, options);
  out = created.release();
  ++live_optimizers;
}

// Runs `check` (the C arguments' checks before a call of `opt` that is collective when it
// is sharded) and agrees on its outcome across the ranks: an argument refused on one rank
// is refused on every rank, none left waiting in the call for the others.
template <class Check>
void agree_on_arguments(kopt::HybridOptimizer& opt, const char* call, Check&& check) {
  kopt::Impl::agree_on_arguments(opt, call, kopt::Impl::outcome_of(check));
}

kopt::AdamConfig config_of(const kopt_adam_config& c) {
  kopt::AdamConfig out{c.lr,
                       c.beta1,
                       c.beta2,
                       c.eps,
                       c.weight_decay,
                       flag(c.decoupled, "config.decoupled"),
                       flag(c.amsgrad, "config.amsgrad"),
                       flag(c.bias_correction, "config.bias_correction"),
                       flag(c.maximize, "config.maximize")};
  out.validate();
  return out;
}

kopt_adam_config c_config(const kopt::AdamConfig& c) {
  return kopt_adam_config{c.lr,        c.beta1,   c.beta2,           c.eps,     c.weight_decay,
                          c.decoupled, c.amsgrad, c.bias_correction, c.maximize};
}

}  // namespace

extern "C" {

const char* kopt_last_error(void) { return last_error.c_str(); }

void kopt_adam_config_default(kopt_adam_config* config) {
  if (config != nullptr) *config = c_config(kopt::AdamConfig{});
}

void kopt_options_default(kopt_options* options) {
  if (options != nullptr) *options = kopt_options{0.0, 0, 65536.0};
}

kopt_status kopt_initialize(void) {
  return guard([] {
    if (Kokkos::is_initialized()) return;
    Kokkos::initialize();
    started_kokkos = true;
  });
}

kopt_status kopt_finalize(void) {
  return guard([] {
    const long live = live_optimizers.load();
    KOPT_THROW_IF(live != 0, "kopt_finalize: " << live << " kopt_optimizer(s) still exist: "
                                               << "kopt_optimizer_destroy them first");
    if (started_kokkos.exchange(false) && Kokkos::is_initialized()) Kokkos::finalize();
  });
}

kopt_status kopt_groups_create(kopt_groups** groups) {
  return guard([&] {
    kopt_groups*& out = deref(groups, "groups");  // checked before anything is allocated
    out = new kopt_groups{};
  });
}

void kopt_groups_destroy(kopt_groups* groups) { delete groups; }

kopt_status kopt_groups_add_group(kopt_groups* groups, const kopt_adam_config* config,
                                  int32_t host_state, size_t* index) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    const kopt::AdamConfig c = config_of(deref(config, "config"));
    g.groups.emplace_back(c, flag(host_state, "host_state") ? kopt::StatePlacement::host
                                                            : kopt::StatePlacement::with_params);
    if (index != nullptr) *index = g.groups.size() - 1;
  });
}

kopt_status kopt_groups_add_param(kopt_groups* groups, size_t group, const char* name, void* param,
                                  kopt_dtype param_dtype, void* grad, kopt_dtype grad_dtype,
                                  int64_t numel, kopt_memory_space space) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    KOPT_THROW_IF(param == nullptr && numel != 0,  // no elements need no memory, as in C++
                  "kopt C API: param '" << name_arg(name) << "' is NULL");
    g.groups[group].add(name_arg(name), tensor(param, param_dtype, numel, space),
                        tensor(grad, grad_dtype, numel, space));
  });
}

kopt_status kopt_groups_add_matrix_param(kopt_groups* groups, size_t group, const char* name,
                                         void* param, kopt_dtype param_dtype, void* grad,
                                         kopt_dtype grad_dtype, int64_t rows, int64_t cols,
                                         kopt_memory_space space) {
  return guard([&] {
    KOPT_THROW_IF(
        rows < 0 || cols < 0 || (rows > 0 && cols > INT64_MAX / rows),
        "kopt C API: param '" << name_arg(name) << "' of " << rows << " x " << cols << " elements");
    const int64_t numel = rows * cols;
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    KOPT_THROW_IF(param == nullptr && numel != 0,  // no elements need no memory, as in C++
                  "kopt C API: param '" << name_arg(name) << "' is NULL");
    g.groups[group].add(name_arg(name), tensor(param, param_dtype, numel, space).matrix(rows, cols),
                        tensor(grad, grad_dtype, numel, space));
  });
}

kopt_status kopt_optimizer_create(const kopt_groups* groups, const kopt_options* options,
                                  kopt_optimizer** optimizer) {
  return guard([&] { create(groups, options_of(options), optimizer); });
}

kopt_status kopt_optimizer_create_sharded(const kopt_groups* groups, const kopt_options* options,
                                          int32_t mpi_comm, int32_t zero_stage,
                                          int32_t average_grads, kopt_optimizer** optimizer) {
  return guard([&] {
    const auto comm = kopt::Impl::mpi_communicator_of_handle(mpi_comm);  // collective
    // Arguments refused on some ranks only refuse them on every rank, as the optimizer's
    // own checks do (kopt/impl/rank_agreement.hpp): none waits for the others.
    kopt::HybridOptions o;
    const std::exception_ptr failed = kopt::Impl::outcome_of([&] {
      o = options_of(options);
      KOPT_THROW_IF(zero_stage != 1 && zero_stage != 2,
                    "kopt C API: zero_stage = " << zero_stage << " must be 1 or 2");
      o.sharding =
          kopt::ShardingOptions{comm, zero_stage == 1 ? kopt::ZeroStage::one : kopt::ZeroStage::two,
                                flag(average_grads, "average_grads") ? kopt::GradReduction::average
                                                                     : kopt::GradReduction::sum};
      deref(groups, "groups");
      deref(optimizer, "optimizer");
    });
    if (comm->size() > 1)
      kopt::Impl::agree_across_ranks(*comm, "kopt_optimizer_create_sharded", failed, "");
    if (failed) std::rethrow_exception(failed);
    create(groups, o, optimizer);
  });
}

void kopt_optimizer_destroy(kopt_optimizer* optimizer) {
  if (optimizer == nullptr) return;
  delete optimizer;
  --live_optimizers;
}

kopt_status kopt_step(kopt_optimizer* optimizer, kopt_step_stats* stats) {
  return guard([&] {
    const kopt::StepStats s = deref(optimizer, "optimizer").opt->step();
    if (stats != nullptr)
      *stats = kopt_step_stats{s.grad_norm, s.clip_factor, s.skipped, s.loss_scale};
  });
}

kopt_status kopt_get_config(kopt_optimizer* optimizer, size_t group, kopt_adam_config* config) {
  return guard([&] {
    deref(config, "config") = c_config(deref(optimizer, "optimizer").opt->group(group).config());
  });
}

kopt_status kopt_set_config(kopt_optimizer* optimizer, size_t group,
                            const kopt_adam_config* config) {
  return guard([&] {
    const kopt::AdamConfig c = config_of(deref(config, "config"));  // validated first
    deref(optimizer, "optimizer").opt->group(group).config() = c;
  });
}

kopt_status kopt_set_grad(kopt_optimizer* optimizer, const char* name, void* grad,
                          kopt_dtype grad_dtype, int64_t numel, kopt_memory_space space) {
  return guard([&] {
    deref(optimizer, "optimizer")
        .opt->set_grad(name_arg(name), tensor(grad, grad_dtype, numel, space));
  });
}

kopt_status kopt_rebind(kopt_optimizer* optimizer, const char* name, void* param,
                        kopt_dtype param_dtype, void* grad, kopt_dtype grad_dtype, int64_t numel,
                        kopt_memory_space space) {
  return guard([&] {
    KOPT_THROW_IF(param == nullptr && numel != 0,
                  "kopt C API: rebind of '" << name_arg(name) << "': param is NULL");
    deref(optimizer, "optimizer")
        .opt->rebind(name_arg(name), tensor(param, param_dtype, numel, space),
                     tensor(grad, grad_dtype, numel, space));
  });
}

kopt_status kopt_reload_model_params(kopt_optimizer* optimizer) {
  return guard([&] { deref(optimizer, "optimizer").opt->reload_model_params(); });
}

kopt_status kopt_save(kopt_optimizer* optimizer, const char* path) {
  return guard([&] {
    kopt::HybridOptimizer& opt = *deref(optimizer, "optimizer").opt;
    std::string p;
    agree_on_arguments(opt, "kopt_save", [&] { p = &deref(path, "path"); });
    opt.save(p);
  });
}

kopt_status kopt_load(kopt_optimizer* optimizer, const char* path, int32_t partial) {
  return guard([&] {
    kopt::HybridOptimizer& opt = *deref(optimizer, "optimizer").opt;
    std::string p;
    kopt::LoadOptions options;
    agree_on_arguments(opt, "kopt_load", [&] {
      p = &deref(path, "path");
      options.partial = flag(partial, "partial");
    });
    opt.load(p, options);
  });
}

kopt_status kopt_loss_scale(const kopt_optimizer* optimizer, double* scale) {
  return guard([&] { deref(scale, "scale") = deref(optimizer, "optimizer").opt->loss_scale(); });
}

kopt_status kopt_step_count(const kopt_optimizer* optimizer, const char* name, int64_t* count) {
  return guard([&] {
    deref(count, "count") = deref(optimizer, "optimizer").opt->step_count(name_arg(name));
  });
}

}  // extern "C"
