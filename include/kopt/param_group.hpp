#pragma once
/// \file
/// kopt::ParamGroup: one group's algorithm, hyperparameters and named parameters.

#include <cstdint>
#include <kopt/algorithm_config.hpp>
#include <kopt/error.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <unordered_set>
#include <vector>

namespace kopt {

/// Where a group's optimizer state (the algorithm's arrays, the masters) lives.
enum class StatePlacement : std::uint8_t {
  /// Beside the params, updated by the execution space that serves their memory.
  with_params,
  /// In host memory (pinned where the backend has it), updated on the host while the grads
  /// and params are copied in chunks between the params' memory and the host (ZeRO-Offload).
  /// Meant for device params; params in host memory work too (the copies are then host
  /// memcpys, which is how host-only builds test the pipeline) but gain nothing.
  host,
};

/// "with_params" or "host".
const char* name_of(StatePlacement placement);

/// A parameter as registered: its unique name, its memory and its gradient's.
struct ParamSpec {
  std::string name;
  Tensor param;
  Tensor grad;  ///< null: no gradient yet
};

/// A config plus named parameters, as torch.optim's param groups. The config's type is the
/// group's algorithm (AdamConfig, SgdConfig, LionConfig, AdagradConfig, LambConfig, MuonConfig,
/// AdafactorConfig); groups of
/// different algorithms live in one optimizer. A group may hold params of several dtypes and memory
/// spaces; the optimizer splits the work by memory space, dtype and algorithm, and the config
/// travels with every piece.
class ParamGroup {
 public:
  /// Validates `config` (throws kopt::InvalidArgument naming the field).
  explicit ParamGroup(const AlgorithmConfig& config = AdamConfig{},
                      StatePlacement placement = StatePlacement::with_params);

  /// Adds a parameter; `name` must be non-empty and unique in the group (the optimizer
  /// checks uniqueness across groups). Returns *this for chaining. Throws
  /// kopt::InvalidArgument on a tensor no optimizer could take (a dtype other than f32, bf16
  /// or f16, a negative size, a null pointer with elements); the optimizer checks the rest
  /// (sizes of param and grad, spaces, shapes) when it is built.
  ParamGroup& add(const std::string& name, const Tensor& param, const Tensor& grad = Tensor{});

  /// The config, as its algorithm's type: `config().lr` for Adam, `config<SgdConfig>()`
  /// for SGD. Throws kopt::InvalidArgument naming both algorithms when the group runs
  /// another one.
  template <class C = AdamConfig>
  C& config() {
    return Impl::config_as<C>(config_);
  }
  template <class C = AdamConfig>
  const C& config() const {
    return Impl::config_as<C>(const_cast<AlgorithmConfig&>(config_));
  }
  /// The config with its algorithm.
  const AlgorithmConfig& algorithm() const { return config_; }
  /// Replaces the config, algorithm included, after validating it. (An optimizer's groups
  /// keep their algorithm: HybridOptimizer::Group has no such call.)
  void set_algorithm(const AlgorithmConfig& config);
  const std::vector<ParamSpec>& params() const { return params_; }
  StatePlacement placement() const { return placement_; }
  /// How the group keeps the masters of its 16-bit params (default MasterStorage::f32).
  /// Returns *this for chaining. The optimizer checks it against the params when built.
  ParamGroup& set_master(MasterStorage master);
  MasterStorage master() const { return storage_.master; }
  /// How a group without masters rounds its updates (MasterStorage::none; set it after
  /// set_master(none), which a later set_master to another form resets): Rounding::
  /// stochastic with `seed`, or nearest (seed 0). Returns *this for chaining.
  ParamGroup& set_rounding(Rounding rounding, std::uint64_t seed = 0);
  /// How the group rounds each step's new state into its bf16, f16 and q8 arrays
  /// (StateStorage::state_rounding): Rounding::stochastic with `seed`, or nearest (the
  /// default; seed 0). Any master form; set the state dtypes first (a group whose arrays are
  /// all f32 is refused: it would round nothing). A group has one seed: the last stochastic
  /// call's, for its params and its arrays alike (each draws bits of its own). Returns *this.
  ParamGroup& set_state_rounding(Rounding rounding, std::uint64_t seed = 0);
  Rounding state_rounding() const { return storage_.state_rounding; }
  /// The element type of every state array of the algorithm (StateStorage::arrays; default
  /// f32; f32, bf16 or f16), clearing the per-array ones. Returns *this for chaining.
  ParamGroup& set_state_dtype(DType dtype);
  /// The element type of the algorithm's state array `array` (its config's
  /// state_array_names, e.g. "exp_avg_sq"; StateStorage::array_dtypes): e.g.
  /// `set_state_dtype(DType::bf16).set_state_dtype("exp_avg_sq", DType::f32)`. Throws
  /// kopt::InvalidArgument naming the algorithm's arrays for another name.
  ParamGroup& set_state_dtype(const std::string& array, DType dtype);
  /// The whole storage form.
  const StateStorage& storage() const { return storage_; }

 private:
  AlgorithmConfig config_;
  StatePlacement placement_;
  StateStorage storage_;
  std::vector<ParamSpec> params_;
  std::unordered_set<std::string> names_;  ///< of params_: add() stays O(1) at 100,000 params
};

}  // namespace kopt
