#include <algorithm>
#include <kopt/error.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/param_group.hpp>
#include <string>
#include <variant>

namespace kopt {

const char* name_of(StatePlacement placement) {
  return placement == StatePlacement::host ? "host" : "with_params";
}

const char* name_of(MasterStorage master) {
  switch (master) {
    case MasterStorage::f32:
      return "f32";
    case MasterStorage::remainder:
      return "remainder";
    case MasterStorage::none:
      return "none";
  }
  return "invalid";
}

const char* name_of(Rounding rounding) {
  switch (rounding) {
    case Rounding::nearest:
      return "nearest";
    case Rounding::stochastic:
      return "stochastic";
  }
  return "invalid";
}

ParamGroup::ParamGroup(const AlgorithmConfig& config, StatePlacement placement)
    : config_(config), placement_(placement) {
  kopt::validate(config_);
  KOPT_THROW_IF(placement != StatePlacement::with_params && placement != StatePlacement::host,
                "ParamGroup: invalid StatePlacement " << static_cast<int>(placement));
}

namespace {
/// Refuses q8 arrays where `config`'s algorithm cannot keep them (it names no
/// q8_square_arrays: blockwise 8-bit state is for Adam's moments). A group-wide q8 counts
/// too where the algorithm has no arrays (Adafactor): the storage asked for is not there.
void check_q8(const StateStorage& storage, const AlgorithmConfig& config, const char* call) {
  // != : nvcc warns that k < 0 is pointless for Adafactor, which names no arrays.
  const auto names_q8 = [&](const auto& c) {
    for (std::size_t k = 0; k != c.state_array_names.size(); ++k)
      if (storage.dtype_of(k) == DType::q8) return true;
    return false;
  };
  const bool q8 = storage.arrays == DType::q8 || std::visit(names_q8, config);
  const bool takes_q8 = std::visit(
      [](const auto& c) {
        return requires { std::decay_t<decltype(c)>::q8_square_arrays; };
      },
      config);
  KOPT_THROW_IF(q8 && !takes_q8, "ParamGroup::" << call << ": q8 state arrays are Adam's (adam, "
                                                << "AdamW) only; " << algorithm_name(config)
                                                << " keeps f32, bf16 or f16 state");
}
}  // namespace

void ParamGroup::set_algorithm(const AlgorithmConfig& config) {
  kopt::validate(config);
  check_q8(storage_, config, "set_algorithm");
  // Per-array dtypes are by the algorithm's array index: another algorithm's arrays are others.
  const bool per_array = std::any_of(storage_.array_dtypes.begin(), storage_.array_dtypes.end(),
                                     [](const auto& d) { return d.has_value(); });
  KOPT_THROW_IF(per_array && config.index() != config_.index(),
                "ParamGroup::set_algorithm("
                    << algorithm_name(config) << "): the group has "
                    << "per-array state dtypes for " << algorithm_name(config_)
                    << "'s arrays; set_state_dtype(dtype) first, which clears them");
  config_ = config;
}

void validate(const StateStorage& storage) {
  KOPT_THROW_IF(std::string(name_of(storage.master)) == "invalid",
                "StateStorage.master: invalid MasterStorage " << static_cast<int>(storage.master));
  KOPT_THROW_IF(std::string(name_of(storage.rounding)) == "invalid",
                "StateStorage.rounding: invalid Rounding " << static_cast<int>(storage.rounding));
  KOPT_THROW_IF(storage.rounding != Rounding::nearest && storage.master != MasterStorage::none,
                "StateStorage.rounding = " << name_of(storage.rounding)
                                           << " with master = " << name_of(storage.master)
                                           << ": only a group without masters (MasterStorage::"
                                           << "none) rounds its updates into the params");
  KOPT_THROW_IF(
      std::string(name_of(storage.state_rounding)) == "invalid",
      "StateStorage.state_rounding: invalid Rounding " << static_cast<int>(storage.state_rounding));
  KOPT_THROW_IF(storage.seed != 0 && !storage.keyed(),
                "StateStorage.seed = " << storage.seed
                                       << " without stochastic rounding, which alone uses it");
  const auto stored = [](DType d) {
    return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::q8;
  };
  KOPT_THROW_IF(!stored(storage.arrays),
                "StateStorage.arrays = " << name_of(storage.arrays)
                                         << " is not a state dtype kopt stores: f32, bf16, f16 "
                                            "or q8");
  for (std::size_t k = 0; k < storage.array_dtypes.size(); ++k)
    KOPT_THROW_IF(storage.array_dtypes[k] && !stored(*storage.array_dtypes[k]),
                  "StateStorage.array_dtypes[" << k << "] = " << name_of(*storage.array_dtypes[k])
                                               << " is not a state dtype kopt stores: f32, bf16, "
                                                  "f16 or q8");
  if (storage.state_rounding == Rounding::stochastic) {
    KOPT_THROW_IF(storage.wide(),
                  "StateStorage.state_rounding = stochastic with every state array f32: it "
                  "would round nothing; set a bf16 or f16 state dtype first");
  }
}

ParamGroup& ParamGroup::set_master(MasterStorage master) {
  StateStorage s = storage_;
  s.master = master;
  // Rounding belongs to groups without masters, and starts at nearest for each (the seed
  // stays while the state arrays round stochastically with it).
  s.rounding = Rounding::nearest;
  if (s.state_rounding == Rounding::nearest) s.seed = 0;
  validate(s);
  storage_ = s;
  return *this;
}

namespace {
/// `storage` with `rounding` in `field` (its params' or its state arrays'), validated. One
/// seed per group: a stochastic call sets it; nearest (seed 0) keeps the other rounding's.
StateStorage with_rounding(StateStorage s, Rounding StateStorage::*field, Rounding rounding,
                           std::uint64_t seed) {
  KOPT_THROW_IF(rounding == Rounding::nearest && seed != 0,
                "StateStorage.seed = " << seed << " without stochastic rounding, which alone "
                                       << "uses it");
  s.*field = rounding;
  if (rounding == Rounding::stochastic || !s.keyed()) s.seed = seed;
  validate(s);
  return s;
}
}  // namespace

ParamGroup& ParamGroup::set_rounding(Rounding rounding, std::uint64_t seed) {
  storage_ = with_rounding(storage_, &StateStorage::rounding, rounding, seed);
  return *this;
}

ParamGroup& ParamGroup::set_state_rounding(Rounding rounding, std::uint64_t seed) {
  storage_ = with_rounding(storage_, &StateStorage::state_rounding, rounding, seed);
  return *this;
}

ParamGroup& ParamGroup::set_state_dtype(DType dtype) {
  StateStorage s = storage_;
  s.arrays = dtype;
  s.array_dtypes = {};
  validate(s);
  check_q8(s, config_, "set_state_dtype");
  storage_ = s;
  return *this;
}

ParamGroup& ParamGroup::set_state_dtype(const std::string& array, DType dtype) {
  const std::size_t k = std::visit(
      [&](const auto& c) {
        const auto& names = c.state_array_names;
        return static_cast<std::size_t>(
            std::find_if(names.begin(), names.end(), [&](const char* n) { return array == n; }) -
            names.begin());
      },
      config_);
  const std::size_t count =
      std::visit([](const auto& c) { return c.state_array_names.size(); }, config_);
  if (k == count) {
    std::string known;
    std::visit(
        [&](const auto& c) {
          for (const char* n : c.state_array_names)
            known += (known.empty() ? "" : ", ") + std::string(n);
        },
        config_);
    KOPT_THROW_IF(true, "ParamGroup::set_state_dtype('"
                            << array << "', " << name_of(dtype) << "): " << algorithm_name(config_)
                            << " has no state array of that name (its arrays: " << known << ")");
  }
  StateStorage s = storage_;
  s.array_dtypes[k] = dtype;
  validate(s);
  check_q8(s, config_, "set_state_dtype");
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
