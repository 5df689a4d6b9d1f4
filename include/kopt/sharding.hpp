#pragma once
/// \file
/// Sharding the optimizer state across data-parallel ranks (ZeRO-1/2), an option of the
/// HybridOptimizer. Each group's params are cut by a kopt::ShardLayout; a rank keeps state
/// and masters for its shard only and updates only it, then the updated params are
/// all-gathered so every rank holds the whole model again. Params that arrive already
/// sharded (Tensor::shard_of) are not cut again: each rank updates its part, nothing is
/// gathered.

#include <cstdint>
#include <kopt/communicator.hpp>
#include <memory>

namespace kopt {

enum class ZeroStage : std::uint8_t {
  /// The caller hands every rank the full, already all-reduced grads (DDP); kopt updates
  /// this rank's shard from them.
  one = 1,
  /// The caller hands every rank its own local grads; kopt reduce-scatters them (in fp32:
  /// 16-bit grads are widened first), so each rank gets the reduced grads of its shard.
  /// Grads must be host-reachable memory.
  two = 2,
};

/// How ZeRO-2 combines the ranks' grads of the params it cuts: their sum, or their mean
/// (sum / world size, each element rounded once, as DDP does; the norm is the mean's).
/// Grads of pre-sharded params (Tensor::shard_of) are taken as already reduced: neither.
enum class GradReduction : std::uint8_t { sum, average };

struct ShardingOptions {
  /// The data-parallel world; required. Every rank must build its optimizer with the same
  /// groups, names, sizes and options, and step together (collective calls).
  std::shared_ptr<Communicator> communicator;
  ZeroStage stage = ZeroStage::one;
  GradReduction reduction = GradReduction::average;  ///< ZeRO-2 only
};

}  // namespace kopt
