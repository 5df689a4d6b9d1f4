#pragma once
/// \file
/// The sharded step's bookkeeping (HybridOptimizer with ShardingOptions): per param, the
/// user's tensors and this rank's piece of it; per group, its ShardLayout and the buffers
/// of the reduce-scatter (ZeRO-2) and the all-gather. The engines only ever see the local
/// pieces, as params of their own. Communication runs on host buffers: params and grads in
/// device memory are staged through them.

#include <kopt/impl/shard_strategy.hpp>
#include <kopt/param_group.hpp>
#include <kopt/shard_layout.hpp>
#include <kopt/sharding.hpp>
#include <memory>
#include <string>
#include <vector>

namespace kopt::Impl {

/// Throws kopt::InvalidArgument, naming the param and the elements, unless the pieces of each
/// pre-sharded param (Tensor::shard_of) over every rank of `peers` (null: a world of one, this
/// optimizer's alone) hold each element of its tensor once. Collective with `peers`; every
/// rank decides the same from the same pieces.
void check_piece_coverage(const std::vector<ParamGroup>& groups, Communicator* peers);

class ShardPlan final : public ShardStrategy {
 public:
  /// Lays out every group; validates the options. Throws kopt::InvalidArgument on bad input.
  ShardPlan(const std::vector<ParamGroup>& groups, const ShardingOptions& options);

  std::size_t size() const override { return params_.size(); }
  /// Whether param `i` (registration ordinal) has elements on this rank.
  bool is_local(std::size_t i) const override { return params_[i].local; }
  using ShardStrategy::local_grad;
  /// This rank's piece of `t`, a tensor shaped as param i, and of `grad` (null for a null
  /// grad; for ZeRO-2 the reduced fp32 grads of the piece).
  Tensor local(std::size_t i, const Tensor& t) const override;
  Tensor local_grad(std::size_t i, const Tensor& grad) const override;
  /// Checks a new grad or param of param i against it (the engines check local pieces only).
  void check(std::size_t i, const Tensor& param, const Tensor& grad) const override;
  void set(std::size_t i, const Tensor& param, const Tensor& grad) override;
  const Tensor& param(std::size_t i) const override { return params_[i].param; }
  const Tensor& grad(std::size_t i) const override { return params_[i].grad; }

  /// ZeRO-2: sums (or averages) the ranks' grads of each shard into this rank's reduce
  /// buffers. Pre-sharded params' grads are neither: the framework reduced them already.
  /// In a world of one it does nothing: the engines read the grads where they are.
  void reduce_grads() override;
  /// Whether grads go through the reduce-scatter: ZeRO-2 in a world of more than one. (In
  /// a world of one the sum is the grad itself, and widening and copying every grad cost
  /// 60 of a 96 ms step.)
  bool reduces_grads() const { return options_.stage == ZeroStage::two && world_ > 1; }
  /// Every rank's updated pieces into every rank's params.
  void gather_params() override;
  ZeroStage stage() const { return options_.stage; }
  Communicator& communicator() const override { return *options_.communicator; }

 private:
  struct Param {
    std::size_t group;
    std::string name;
    Tensor param, grad;  ///< the user's
    bool presharded;     ///< shard_of: not cut again, not gathered
    bool local;
    ShardSegment segment{};  ///< when local and not presharded
    /// ZeRO-2, params a device engine updates: the piece's reduced grads, in the param's
    /// own memory (the reduce-scatter runs in host memory).
    std::shared_ptr<void> device_grad;
  };
  struct Group {
    ShardLayout layout;
    std::vector<std::size_t> ordinals;  ///< of the params it cuts, in layout order
    std::vector<float> send, recv;      ///< ZeRO-2: the packed local grads, the reduced shard
    bool whole = false;  ///< params owned whole by one rank (ShardLayout::whole_params)
  };

  ShardingOptions options_;
  int rank_ = 0, world_ = 1;
  std::vector<Param> params_;
  std::vector<Group> groups_;
  std::vector<unsigned char> gather_in_, gather_out_, staged_;
};

}  // namespace kopt::Impl
