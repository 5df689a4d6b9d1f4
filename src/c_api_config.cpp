// The C interface's configs of any algorithm: fields by name, through each config's
// visit_fields, so a new algorithm needs nothing here.
#include <cmath>
#include <cstring>
#include <kopt/algorithm_config.hpp>
#include <string>
#include <type_traits>

#include "c_api_support.hpp"

struct kopt_config {
  kopt::AlgorithmConfig config;
};

namespace {

using namespace kopt::c_api;

/// Calls f(field) on the field of `config` named `name` (a double& or a bool&); throws
/// naming the field and the algorithm when it has none of that name.
template <class F>
void with_field(kopt::AlgorithmConfig& config, const char* name, F&& f) {
  KOPT_THROW_IF(name == nullptr, "kopt C API: field is NULL");
  bool found = false;
  std::visit(
      [&](auto& c) {
        c.visit_fields([&](const char* field, auto& value) {
          if (!found && std::strcmp(field, name) == 0) {
            found = true;
            f(value);
          }
        });
      },
      config);
  KOPT_THROW_IF(!found,
                "kopt C API: " << kopt::algorithm_name(config) << " has no field '" << name << "'");
}

/// The names kopt_config_create knows, for its error message.
std::string algorithm_names() {
  std::string out;
  for (std::size_t i = 0; i < kopt::Impl::num_algorithms; ++i)
    out += std::string(i == 0 ? "'" : ", '") +
           kopt::Impl::visit_config_type(i, [](auto c) { return decltype(c)::name; }) + "'";
  return out;
}

/// kopt_groups_set_rounding's and kopt_groups_set_state_rounding's checks: `set` called with
/// the rounding named.
template <class Set>
kopt_status set_group_rounding(kopt_groups* groups, size_t group, const char* rounding, Set&& set) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    KOPT_THROW_IF(rounding == nullptr, "kopt C API: rounding is NULL");
    const std::string name = rounding;
    KOPT_THROW_IF(name != "nearest" && name != "stochastic",
                  "kopt C API: rounding '" << name << "' is none of \"nearest\", \"stochastic\"");
    set(g.groups[group], name == "nearest" ? kopt::Rounding::nearest : kopt::Rounding::stochastic);
  });
}
}  // namespace

extern "C" {

kopt_status kopt_config_create(const char* algorithm, kopt_config** config) {
  return guard([&] {
    deref(config, "config");
    KOPT_THROW_IF(algorithm == nullptr, "kopt C API: algorithm is NULL");
    const std::size_t index = kopt::Impl::algorithm_index(algorithm);
    KOPT_THROW_IF(index == kopt::Impl::num_algorithms,
                  "kopt C API: no algorithm named '"
                      << algorithm << "' (known: " << algorithm_names()
                      << "; 'adam' is AdamW by default, Adam with decoupled = 0)");
    *config = new kopt_config{
        kopt::Impl::visit_config_type(index, [](auto c) { return kopt::AlgorithmConfig(c); })};
  });
}

void kopt_config_destroy(kopt_config* config) { delete config; }

const char* kopt_config_algorithm(const kopt_config* config) {
  return config == nullptr ? "" : kopt::algorithm_name(config->config);
}

kopt_status kopt_config_set(kopt_config* config, const char* field, double value) {
  return guard([&] {
    with_field(deref(config, "config").config, field, [&](auto& f) {
      if constexpr (std::is_same_v<std::decay_t<decltype(f)>, bool>) {
        KOPT_THROW_IF(value != 0.0 && value != 1.0,
                      "kopt C API: " << field << " = " << value << " must be 0 or 1");
        f = value == 1.0;
      } else {
        f = value;
      }
    });
  });
}

kopt_status kopt_config_get(const kopt_config* config, const char* field, double* value) {
  return guard([&] {
    double& out = deref(value, "value");
    kopt::AlgorithmConfig copy = deref(config, "config").config;
    with_field(copy, field, [&](auto& f) { out = static_cast<double>(f); });
  });
}

kopt_status kopt_groups_add_group_config(kopt_groups* groups, const kopt_config* config,
                                         int32_t host_state, size_t* index) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    const kopt::AlgorithmConfig& c = deref(config, "config").config;
    g.groups.emplace_back(c, flag(host_state, "host_state") ? kopt::StatePlacement::host
                                                            : kopt::StatePlacement::with_params);
    if (index != nullptr) *index = g.groups.size() - 1;
  });
}

kopt_status kopt_groups_set_master(kopt_groups* groups, size_t group, const char* master) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    KOPT_THROW_IF(master == nullptr, "kopt C API: master is NULL");
    const std::string name = master;
    KOPT_THROW_IF(
        name != "f32" && name != "remainder" && name != "none",
        "kopt C API: master '" << name << "' is none of \"f32\", \"remainder\", \"none\"");
    g.groups[group].set_master(name == "f32"         ? kopt::MasterStorage::f32
                               : name == "remainder" ? kopt::MasterStorage::remainder
                                                     : kopt::MasterStorage::none);
  });
}

kopt_status kopt_groups_set_rounding(kopt_groups* groups, size_t group, const char* rounding,
                                     uint64_t seed) {
  return set_group_rounding(groups, group, rounding, [&](kopt::ParamGroup& g, kopt::Rounding r) {
    g.set_rounding(r, seed);
  });
}

kopt_status kopt_groups_set_state_rounding(kopt_groups* groups, size_t group, const char* rounding,
                                           uint64_t seed) {
  return set_group_rounding(groups, group, rounding, [&](kopt::ParamGroup& g, kopt::Rounding r) {
    g.set_state_rounding(r, seed);
  });
}

kopt_status kopt_groups_set_state_dtype(kopt_groups* groups, size_t group, kopt_dtype dtype) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    g.groups[group].set_state_dtype(state_dtype_of(dtype));
  });
}

kopt_status kopt_groups_set_array_dtype(kopt_groups* groups, size_t group, const char* array,
                                        kopt_dtype dtype) {
  return guard([&] {
    auto& g = deref(groups, "groups");
    KOPT_THROW_IF(group >= g.groups.size(), "kopt C API: group " << group << " does not exist ("
                                                                 << g.groups.size() << " groups)");
    KOPT_THROW_IF(array == nullptr, "kopt C API: array is NULL");
    g.groups[group].set_state_dtype(std::string(array), state_dtype_of(dtype));
  });
}

kopt_status kopt_get_group_config(kopt_optimizer* optimizer, size_t group, kopt_config** config) {
  return guard([&] {
    deref(config, "config");
    const auto g = deref(optimizer, "optimizer").opt->group(group);
    *config = new kopt_config{g.algorithm()};
  });
}

kopt_status kopt_set_group_config(kopt_optimizer* optimizer, size_t group,
                                  const kopt_config* config) {
  return guard([&] {
    const kopt::AlgorithmConfig& c = deref(config, "config").config;
    auto g = deref(optimizer, "optimizer").opt->group(group);
    kopt::validate(c);
    std::visit(
        [&](const auto& typed) {  // throws, changing nothing, for another algorithm
          g.template config<std::decay_t<decltype(typed)>>() = typed;
        },
        c);
  });
}

kopt_status kopt_set_lr(kopt_optimizer* optimizer, size_t group, double lr) {
  return guard([&] {
    auto g = deref(optimizer, "optimizer").opt->group(group);
    kopt::AlgorithmConfig c = g.algorithm();
    std::visit([&](auto& typed) { typed.lr = lr; }, c);
    kopt::validate(c);
    std::visit(
        [&](const auto& typed) { g.template config<std::decay_t<decltype(typed)>>() = typed; }, c);
  });
}

}  // extern "C"
