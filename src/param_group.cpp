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

void validate(const StateStorage& storage) {
  KOPT_THROW_IF(
      storage.master != MasterStorage::f32 && storage.master != MasterStorage::remainder,
      "StateStorage.master: invalid MasterStorage " << static_cast<int>(storage.master));
  KOPT_THROW_IF(storage.arrays != DType::f32 && storage.arrays != DType::bf16,
                "StateStorage.arrays = " << name_of(storage.arrays)
                                         << " is not a state dtype kopt stores: f32 or bf16");
}

ParamGroup& ParamGroup::set_master(MasterStorage master) {
  StateStorage s = storage_;
  s.master = master;
  validate(s);
  KOPT_THROW_IF(master == MasterStorage::remainder && placement_ == StatePlacement::host,
                "ParamGroup::set_master(remainder): a group with StatePlacement::host keeps "
                "its masters apart from the params (their host copy), so they cannot be "
                "remainders; use MasterStorage::f32 there");
  storage_ = s;
  return *this;
}

ParamGroup& ParamGroup::set_state_dtype(DType dtype) {
  StateStorage s = storage_;
  s.arrays = dtype;
  validate(s);
  KOPT_THROW_IF(dtype != DType::f32 && placement_ == StatePlacement::host,
                "ParamGroup::set_state_dtype(" << name_of(dtype) << "): the offload pipeline "
                                               << "(StatePlacement::host) keeps f32 state arrays "
                                               << "only, for now");
  storage_ = s;
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
