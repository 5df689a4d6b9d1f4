#pragma once
/// \file
/// How a HybridOptimizer's params map to what its engines hold on this rank, as one object
/// the optimizer always has: the identity for an unsharded optimizer (Unsharded, a world of
/// one), ZeRO-1/2 pieces over a communicator for a sharded one (ShardPlan). step, save and
/// load call the same functions either way; only the strategy differs.

#include <kopt/communicator.hpp>
#include <kopt/impl/norm_parts.hpp>
#include <kopt/param_group.hpp>
#include <vector>

namespace kopt::Impl {

class ShardStrategy {
 public:
  virtual ~ShardStrategy() = default;
  /// Params, by registration ordinal (groups in order, each group's params in order).
  virtual std::size_t size() const = 0;
  /// Whether param i has elements on this rank (an engine holds them).
  virtual bool is_local(std::size_t i) const = 0;
  /// This rank's piece of `t`, a tensor shaped as param i; of a grad (null for a null grad;
  /// ZeRO-2: the piece's reduced fp32 grads).
  virtual Tensor local(std::size_t i, const Tensor& t) const = 0;
  virtual Tensor local_grad(std::size_t i, const Tensor& grad) const = 0;
  Tensor local_param(std::size_t i) const { return local(i, param(i)); }
  Tensor local_grad(std::size_t i) const { return local_grad(i, grad(i)); }
  /// Checks a new param or grad of param i against it beyond what an engine checks of its
  /// piece (the whole tensor, on every rank).
  virtual void check(std::size_t i, const Tensor& param, const Tensor& grad) const = 0;
  /// The user's tensors of param i, as they are now.
  virtual void set(std::size_t i, const Tensor& param, const Tensor& grad) = 0;
  virtual const Tensor& param(std::size_t i) const = 0;
  virtual const Tensor& grad(std::size_t i) const = 0;
  /// Before the norm: ZeRO-2's reduce-scatter of the grads; nothing otherwise.
  virtual void reduce_grads() = 0;
  /// After the update: every rank's updated pieces into every rank's params.
  virtual void gather_params() = 0;
  /// The ranks that share the params (a world of one when unsharded).
  virtual Communicator& communicator() const = 0;
};

/// The identity: every param whole on this rank, in a world of one.
class Unsharded final : public ShardStrategy {
 public:
  explicit Unsharded(const std::vector<ParamGroup>& groups) {
    for (const ParamGroup& g : groups)
      for (const ParamSpec& p : g.params()) params_.push_back({p.param, p.grad});
  }
  std::size_t size() const override { return params_.size(); }
  bool is_local(std::size_t) const override { return true; }
  Tensor local(std::size_t, const Tensor& t) const override { return t; }
  Tensor local_grad(std::size_t, const Tensor& grad) const override { return grad; }
  void check(std::size_t, const Tensor&, const Tensor&) const override {}
  void set(std::size_t i, const Tensor& param, const Tensor& grad) override {
    params_[i] = {param, grad};
  }
  const Tensor& param(std::size_t i) const override { return params_[i].param; }
  const Tensor& grad(std::size_t i) const override { return params_[i].grad; }
  void reduce_grads() override {}
  void gather_params() override {}
  Communicator& communicator() const override { return one_; }

 private:
  struct Param {
    Tensor param, grad;
  };
  std::vector<Param> params_;
  mutable SingleProcessCommunicator one_;
};

}  // namespace kopt::Impl
