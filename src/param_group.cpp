#include <algorithm>
#include <kopt/error.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/param_group.hpp>

namespace kopt {

const char* name_of(StatePlacement placement) {
  return placement == StatePlacement::host ? "host" : "with_params";
}

const char* name_of(MasterStorage master) {
  return master == MasterStorage::remainder ? "remainder" : "f32";
}

ParamGroup::ParamGroup(const AlgorithmConfig& config, StatePlacement placement)
    : config_(config), placement_(placement) {
  kopt::validate(config_);
  KOPT_THROW_IF(placement != StatePlacement::with_params && placement != StatePlacement::host,
                "ParamGroup: invalid StatePlacement " << static_cast<int>(placement));
}

void ParamGroup::set_algorithm(const AlgorithmConfig& config) {
  kopt::validate(config);
  config_ = config;
}

ParamGroup& ParamGroup::set_master(MasterStorage master) {
  KOPT_THROW_IF(master != MasterStorage::f32 && master != MasterStorage::remainder,
                "ParamGroup::set_master: invalid MasterStorage " << static_cast<int>(master));
  KOPT_THROW_IF(master == MasterStorage::remainder && placement_ == StatePlacement::host,
                "ParamGroup::set_master(remainder): a group with StatePlacement::host keeps "
                "its masters apart from the params (their host copy), so they cannot be "
                "remainders; use MasterStorage::f32 there");
  master_ = master;
  return *this;
}

ParamGroup& ParamGroup::add(const std::string& name, const Tensor& param, const Tensor& grad) {
  KOPT_THROW_IF(name.empty(), "ParamGroup::add: a parameter needs a non-empty name");
  KOPT_THROW_IF(names_.count(name) != 0,
                "ParamGroup::add: parameter name '" << name << "' is already in this group");
  Impl::check_tensor_fields("ParamGroup::add", name, "param", param);
  if (grad.data != nullptr || grad.numel != 0)
    Impl::check_tensor_fields("ParamGroup::add", name, "grad", grad);
  names_.insert(name);
  try {
    params_.push_back(ParamSpec{name, param, grad});
  } catch (...) {
    names_.erase(name);  // unchanged on failure
    throw;
  }
  return *this;
}

}  // namespace kopt
