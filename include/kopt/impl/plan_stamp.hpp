#pragma once
/// \file
/// What an engine's step plan is keyed on, written once for both engines: the kernel class
/// of each param (ClassKey, classify_entries) and what a plan was built for (PlanStamp).

#include <algorithm>
#include <cstdint>
#include <kopt/impl/param_registry.hpp>
#include <variant>
#include <vector>

namespace kopt::Impl {

/// What picks a param's compiled update: its dtypes and its group's form of the update.
struct ClassKey {
  DType param, grad;
  int variant;
  bool operator==(const ClassKey&) const = default;
};

/// The kernel class of every entry this step: signature[i] is its key's index in `keys` + 1,
/// or 0 for an entry without a grad (skipped); keys in order of first appearance.
/// `on_updated(i)` is called for each entry with a grad, in the same pass (checks an engine
/// makes per updated entry cost no second pass over every entry).
template <class Policy, class OnUpdated = void (*)(std::size_t)>
void classify_entries(
    const ParamRegistry& registry, std::vector<int>& signature, std::vector<ClassKey>& keys,
    OnUpdated&& on_updated = [](std::size_t) {}) {
  signature.assign(registry.size(), 0);
  keys.clear();
  for (std::size_t i = 0; i < registry.size(); ++i) {
    const ParamEntry& e = registry[i];
    if (e.grad.data == nullptr) continue;
    on_updated(i);
    const ClassKey key{
        e.param.dtype, e.grad.dtype,
        Policy::variant(std::get<typename Policy::Config>(registry.config(e.group)))};
    const auto it = std::find(keys.begin(), keys.end(), key);
    signature[i] = static_cast<int>(it - keys.begin()) + 1;
    if (it == keys.end()) keys.push_back(key);
  }
}

/// What an engine's step plan (chunk tables, slots, classes) was built for: the registry's
/// version (bumped by every add, rebind, dtype or group change) and each group's policy
/// variant (a config change may pick another compiled update without touching the
/// registry). A plan is reused while both hold; both engines keep one.
template <class Policy>
class PlanStamp {
 public:
  bool current(const ParamRegistry& registry) const {
    if (!valid_ || version_ != registry.version() || variants_.size() != registry.num_groups())
      return false;
    for (std::size_t g = 0; g < registry.num_groups(); ++g)
      if (variant_of(registry, g) != variants_[g]) return false;
    return true;
  }
  /// Called once a plan is built for the registry as it is now.
  void take(const ParamRegistry& registry) {
    variants_.resize(registry.num_groups());
    for (std::size_t g = 0; g < registry.num_groups(); ++g) variants_[g] = variant_of(registry, g);
    version_ = registry.version();
    valid_ = true;
  }
  /// The next step plans again (arrays moved, masters to sync, a build that failed).
  void clear() { valid_ = false; }

 private:
  static int variant_of(const ParamRegistry& registry, std::size_t g) {
    return Policy::variant(std::get<typename Policy::Config>(registry.config(g)));
  }
  bool valid_ = false;
  std::uint64_t version_ = 0;
  std::vector<int> variants_;
};

}  // namespace kopt::Impl
