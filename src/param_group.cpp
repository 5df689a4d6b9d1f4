#include <algorithm>
#include <kopt/error.hpp>
#include <kopt/param_group.hpp>

namespace kopt {

ParamGroup::ParamGroup(const AdamConfig& config) : config_(config) { config_.validate(); }

ParamGroup& ParamGroup::add(const std::string& name, const Tensor& param, const Tensor& grad) {
  KOPT_THROW_IF(name.empty(), "ParamGroup::add: a parameter needs a non-empty name");
  const bool taken = std::any_of(params_.begin(), params_.end(),
                                 [&](const ParamSpec& p) { return p.name == name; });
  KOPT_THROW_IF(taken, "ParamGroup::add: parameter name '" << name << "' is already in this group");
  params_.push_back(ParamSpec{name, param, grad});
  return *this;
}

}  // namespace kopt
