#pragma once
/// \file
/// kopt::ParamGroup: one group's hyperparameters and its named parameters.

#include <kopt/adam_config.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <vector>

namespace kopt {

/// A parameter as registered: its unique name, its memory and its gradient's.
struct ParamSpec {
  std::string name;
  Tensor param;
  Tensor grad;  ///< null: no gradient yet
};

/// A config plus named parameters, as torch.optim's param groups. A group may hold params of
/// several dtypes and memory spaces; the optimizer splits the work by memory space and dtype,
/// and the config travels with every piece.
class ParamGroup {
 public:
  /// Validates `config` (throws kopt::InvalidArgument naming the field).
  explicit ParamGroup(const AdamConfig& config = AdamConfig{});

  /// Adds a parameter; `name` must be non-empty and unique in the group (the optimizer
  /// checks uniqueness across groups). Returns *this for chaining. Checks nothing else yet:
  /// the optimizer validates tensors when it is built.
  ParamGroup& add(const std::string& name, const Tensor& param, const Tensor& grad = Tensor{});

  AdamConfig& config() { return config_; }
  const AdamConfig& config() const { return config_; }
  const std::vector<ParamSpec>& params() const { return params_; }

 private:
  AdamConfig config_;
  std::vector<ParamSpec> params_;
};

}  // namespace kopt
