#include <algorithm>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/shard_plan.hpp>
#include <string>

namespace kopt::Impl {

namespace {
// A group whose algorithm needs whole params (Muon, Adafactor) keeps each param whole on
// one rank, balanced by its cost (Muon's Newton-Schulz: numel times the smaller side, per
// product; Adafactor's: numel); every other group is cut into equal shards. A group with q8
// arrays aligns its params and shards on q8 blocks: each rank then updates whole blocks, the
// same ones at any world size, so that every result is bitwise that of one process.
ShardLayout layout_of(const ParamGroup& group, int world) {
  const std::int64_t align = group.storage().any(DType::q8) ? q8_block : ShardLayout::alignment;
  std::vector<std::int64_t> numels;
  std::vector<double> costs;
  for (const ParamSpec& p : group.params()) {
    if (p.param.is_shard()) continue;
    numels.push_back(p.param.numel);
    const double side = p.param.is_matrix() && needs_whole_matrices(group.algorithm())
                            ? static_cast<double>(std::min(p.param.rows, p.param.cols))
                            : 1.0;
    costs.push_back(static_cast<double>(p.param.numel) * (side + 1.0));
  }
  if (needs_whole_tensors(group.algorithm()))
    return ShardLayout::whole_params(numels, costs, world, align);
  return ShardLayout(numels, world, align);
}

// dst[k] = float(src[k]) for a grad in host-reachable memory.
void widen(float* dst, const Tensor& src) {
  const auto n = static_cast<std::size_t>(src.numel);
  switch (src.dtype) {
    case DType::bf16:
      for (std::size_t k = 0; k < n; ++k)
        dst[k] = to_float(static_cast<const bfloat16*>(src.data)[k]);
      break;
    case DType::f16:
      for (std::size_t k = 0; k < n; ++k)
        dst[k] = to_float(static_cast<const float16*>(src.data)[k]);
      break;
    default:
      std::memcpy(dst, src.data, n * sizeof(float));
  }
}
}  // namespace

ShardPlan::ShardPlan(const std::vector<ParamGroup>& groups, const ShardingOptions& options)
    : options_(options) {
  KOPT_THROW_IF(!options.communicator, "kopt::ShardingOptions: communicator is required");
  KOPT_THROW_IF(options.stage != ZeroStage::one && options.stage != ZeroStage::two,
                "kopt::ShardingOptions: stage " << static_cast<int>(options.stage)
                                                << " is not ZeroStage::one or two");
  KOPT_THROW_IF(
      options.reduction != GradReduction::sum && options.reduction != GradReduction::average,
      "kopt::ShardingOptions: unknown reduction " << static_cast<int>(options.reduction));
  rank_ = options.communicator->rank();
  world_ = options.communicator->size();
  KOPT_THROW_IF(world_ < 1 || rank_ < 0 || rank_ >= world_,
                "kopt::ShardingOptions: communicator says rank " << rank_ << " of " << world_);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups_.push_back(Group{
        layout_of(groups[g], world_), {}, {}, {}, needs_whole_tensors(groups[g].algorithm())});
    Group& group = groups_.back();
    for (const ParamSpec& p : groups[g].params()) {
      Param item{g, p.name, p.param, p.grad, p.param.is_shard(), p.param.is_shard(), {}, nullptr};
      if (!item.presharded) {
        const std::size_t in_layout = group.ordinals.size();
        group.ordinals.push_back(params_.size());
        item.local = group.layout.find_segment(rank_, in_layout, item.segment);
        const bool device_engine =
            std::string(engine_space_for(p.param.space)) != engine_space_for(MemorySpace::host);
        if (reduces_grads() && item.local && device_engine)
          item.device_grad = allocate_bytes(
              p.param.space, static_cast<std::size_t>(item.segment.length) * sizeof(float),
              "kopt::ShardPlan::reduced_grad");
      }
      params_.push_back(item);
      check(params_.size() - 1, p.param, p.grad);
    }
    if (reduces_grads()) {
      group.send.assign(static_cast<std::size_t>(group.layout.padded_size()), 0.0f);
      group.recv.assign(static_cast<std::size_t>(group.layout.shard_size()), 0.0f);
    }
  }
}

void ShardPlan::check(std::size_t i, const Tensor& param, const Tensor& grad) const {
  const Param& p = params_[i];
  // A piece the training code cut (shard_of) stays where it was: its state is keyed by it.
  const bool moved = p.presharded && (param.global_numel != p.param.global_numel ||
                                      param.global_offset != p.param.global_offset);
  KOPT_THROW_IF_AS(ShapeMismatch,
                   param.numel != p.param.numel || param.is_shard() != p.presharded || moved,
                   "kopt::HybridOptimizer (sharded): parameter '"
                       << p.name << "' is " << describe(p.param) << ", not " << describe(param));
  if (grad.is_null()) return;
  KOPT_THROW_IF_AS(ShapeMismatch, grad.numel != param.numel,
                   "kopt::HybridOptimizer (sharded): grad " << describe(grad) << " of parameter '"
                                                            << p.name << "' does not match "
                                                            << describe(param));
  // Device grads are fine: reduce_grads() stages them through host memory.
  KOPT_THROW_IF(options_.stage == ZeroStage::two && !p.presharded && grad.dtype != DType::f32 &&
                    grad.dtype != DType::bf16 && grad.dtype != DType::f16,
                "kopt::HybridOptimizer (ZeRO-2): grad " << describe(grad) << " of parameter '"
                                                        << p.name
                                                        << "' must be an f32, bf16 or f16 tensor");
}

void ShardPlan::set(std::size_t i, const Tensor& param, const Tensor& grad) {
  check(i, param, grad);
  params_[i].param = param;
  params_[i].grad = grad;
}

Tensor ShardPlan::local(std::size_t i, const Tensor& t) const {
  const Param& p = params_[i];
  // A param kept whole is itself (its 2-D shape too).
  if (p.presharded || t.is_null() || groups_[p.group].whole) return t;
  // Marked as a piece of the whole param: the engines' norm passes need to know where it
  // ends (its last block may be cut).
  return t.slice(p.segment.param_offset, p.segment.length)
      .shard_of(t.numel, p.segment.param_offset);
}

Tensor ShardPlan::local_grad(std::size_t i, const Tensor& grad) const {
  const Param& p = params_[i];
  if (grad.is_null()) return Tensor{};
  if (p.presharded || !reduces_grads()) return local(i, grad);
  Tensor reduced =
      p.device_grad
          ? Tensor(p.device_grad.get(), p.segment.length, DType::f32, p.param.space)
          : Tensor(const_cast<float*>(groups_[p.group].recv.data()) + p.segment.shard_offset,
                   p.segment.length, DType::f32, MemorySpace::host);
  return groups_[p.group].whole ? reduced : reduced.shard_of(p.param.numel, p.segment.param_offset);
}

void ShardPlan::reduce_grads() {
  if (!reduces_grads()) return;
  fence_all("kopt::ShardPlan::reduce_grads");  // grads written by device work
  for (Group& group : groups_) {
    if (group.layout.padded_size() == 0) continue;
    std::fill(group.send.begin(), group.send.end(), 0.0f);  // padding and null grads
    for (std::size_t k = 0; k < group.ordinals.size(); ++k) {
      Tensor g = params_[group.ordinals[k]].grad;
      if (g.is_null()) continue;
      if (g.space == MemorySpace::cuda) {  // stage device grads through host memory
        staged_.resize(g.bytes());
        copy_bytes(staged_.data(), MemorySpace::host, g.data, g.space, g.bytes());
        g.data = staged_.data();
      }
      widen(group.send.data() + group.layout.param_start(k), g);
    }
    options_.communicator->reduce_scatter_sum(group.send.data(), group.recv.data(),
                                              group.recv.size());
    // The average of the ranks' grads, each element rounded once (sum / world). Applied
    // here, to the grads kopt reduced, and not to pre-sharded ones, which arrive reduced.
    if (options_.reduction == GradReduction::average && world_ > 1)
      for (float& x : group.recv) x /= static_cast<float>(world_);
    for (const std::size_t i : group.ordinals)
      if (params_[i].device_grad)
        copy_bytes(params_[i].device_grad.get(), params_[i].param.space,
                   group.recv.data() + params_[i].segment.shard_offset, MemorySpace::host,
                   static_cast<std::size_t>(params_[i].segment.length) * sizeof(float));
  }
}

void ShardPlan::gather_params() {
  for (const Group& group : groups_) {
    if (group.layout.padded_size() == 0 || world_ == 1) continue;
    // Bytes per rank: its segments, param by param, in the params' own dtypes.
    std::vector<std::size_t> bytes(static_cast<std::size_t>(world_), 0);
    std::vector<std::vector<ShardSegment>> segments(bytes.size());
    for (int r = 0; r < world_; ++r) {
      segments[static_cast<std::size_t>(r)] = group.layout.segments(r);
      for (const ShardSegment& s : segments[static_cast<std::size_t>(r)])
        bytes[static_cast<std::size_t>(r)] += static_cast<std::size_t>(s.length) *
                                              size_of(params_[group.ordinals[s.param]].param.dtype);
    }
    std::size_t total = 0;
    for (const std::size_t b : bytes) total += b;
    gather_in_.resize(bytes[static_cast<std::size_t>(rank_)]);
    gather_out_.resize(total);
    std::size_t at = 0;
    for (const ShardSegment& s : segments[static_cast<std::size_t>(rank_)]) {
      const Tensor piece = params_[group.ordinals[s.param]].param.slice(s.param_offset, s.length);
      copy_bytes(gather_in_.data() + at, MemorySpace::host, piece.data, piece.space, piece.bytes());
      at += piece.bytes();
    }
    options_.communicator->all_gather_bytes(gather_in_.data(), gather_out_.data(), bytes);
    at = 0;
    for (int r = 0; r < world_; ++r)
      for (const ShardSegment& s : segments[static_cast<std::size_t>(r)]) {
        const Tensor piece = params_[group.ordinals[s.param]].param.slice(s.param_offset, s.length);
        if (r != rank_)
          copy_bytes(piece.data, piece.space, gather_out_.data() + at, MemorySpace::host,
                     piece.bytes());
        at += piece.bytes();
      }
  }
}

}  // namespace kopt::Impl
