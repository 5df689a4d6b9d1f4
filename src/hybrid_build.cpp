// HybridOptimizer's construction: every check on the groups, tensors and options, then one
// engine per (execution space, dtype, offload, algorithm, storage form); sharded, the ranks
// agree on the outcome and on what must be the same on each of them.
#include <algorithm>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/param_overlaps.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/impl/rank_agreement.hpp>
#include <kopt/impl/shard_plan.hpp>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

namespace kopt {

namespace {
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

/// The optimizer state a param would hold beside it: its algorithm's arrays (each of its
/// dtype) + the master of a 16-bit param (fp32: 4 B, a remainder: 2 B, none: 0), padded as
/// the engines lay them out.
std::size_t device_state_bytes(const Tensor& param, const AlgorithmConfig& config,
                               const StateStorage& storage) {
  const std::int64_t align = storage.any(DType::q8) ? Impl::q8_block : 16;  // ParamRegistry
  const auto padded = static_cast<std::size_t>((param.numel + align - 1) / align * align);
  const std::size_t master = storage.master == MasterStorage::f32         ? sizeof(float)
                             : storage.master == MasterStorage::remainder ? sizeof(std::uint16_t)
                                                                          : 0;
  std::size_t bytes = param.dtype != DType::f32 ? padded * master : 0;
  const unsigned kept = Impl::arrays_of(config);
  for (std::size_t k = 0; k < max_state_arrays; ++k) {
    if ((kept >> k & 1u) == 0) continue;
    const DType d = storage.dtype_of(k);
    bytes += d == DType::q8 ? static_cast<std::size_t>(Impl::q8_bytes(param.numel))
                            : padded * size_of(d);
  }
  return bytes;
}

/// `call`: the member that checks ("" for the constructor).
void validate_group_config(const AlgorithmConfig& config, std::size_t g, const char* call) {
  try {
    kopt::validate(config);
  } catch (const InvalidArgument& e) {
    KOPT_THROW_IF(true, "kopt::HybridOptimizer" << (*call != '\0' ? "::" : "") << call << ": group "
                                                << g << ": " << Impl::embedded(e.what()));
  }
}
}  // namespace

HybridOptimizer::HybridOptimizer(std::vector<ParamGroup> groups, const HybridOptions& options)
    : groups_(std::move(groups)), options_(options) {
  Communicator* peers = peers_();
  if (peers == nullptr) {
    build_();
    if (options_.sharding) Impl::check_piece_coverage(groups_, nullptr);
    return;
  }
  // Every rank checks and builds, then all agree: a rank whose checks failed would
  // otherwise leave the others waiting in their first step's collectives, and ranks built
  // from different groups would exchange mismatched buffers.
  const std::exception_ptr failed = Impl::outcome_of([&] { build_(); });
  Impl::agree_across_ranks(*peers, "kopt::HybridOptimizer", failed,
                           Impl::rank_invariants(groups_, options_));
  Impl::check_piece_coverage(groups_, peers);  // the same pieces, so the same outcome, on each
}

Communicator* HybridOptimizer::peers_() const {
  if (!options_.sharding || !options_.sharding->communicator) return nullptr;
  Communicator& comm = *options_.sharding->communicator;
  const int world = comm.size(), rank = comm.rank();  // a bad pair: ShardPlan says so
  return world > 1 && rank >= 0 && rank < world ? &comm : nullptr;
}

void HybridOptimizer::build_() {
  if (options_.max_grad_norm) {
    const double m = *options_.max_grad_norm;
    KOPT_THROW_IF(!(std::isfinite(m) && m > 0),
                  "HybridOptions.max_grad_norm = " << m << " is invalid: must be finite and > 0");
  }
  if (options_.loss_scaling) scaler_.emplace(*options_.loss_scaling);  // validates

  options_.offload.validate();
  Impl::require_kokkos("kopt::HybridOptimizer");
  for (const ParamGroup& g : groups_)  // the tensors themselves, before any plan reads them
    for (const ParamSpec& p : g.params()) {
      Impl::check_tensor_fields("kopt::HybridOptimizer", p.name, "param", p.param);
      if (p.grad.data != nullptr || p.grad.numel != 0)
        Impl::check_tensor_fields("kopt::HybridOptimizer", p.name, "grad", p.grad);
    }
  // Sharded: the engines get this rank's piece of each param (checked by the plan first).
  if (options_.sharding)
    shards_ = std::make_unique<Impl::ShardPlan>(groups_, *options_.sharding);
  else
    shards_ = std::make_unique<Impl::Unsharded>(groups_);

  // Everything is checked before the first engine exists, and the engines check every
  // tensor while params are added: a throw here leaves nothing behind.
  struct Pending {
    std::size_t group;
    const ParamSpec* spec;
    std::string space;  // the execution space serving the param's memory
    bool offloaded;
    StateStorage storage;  // of its engine
  };
  std::vector<Pending> pending;
  std::vector<std::size_t> candidates, candidate_bytes;  // for the offload rule
  std::set<std::string> names;
  const std::string host_space = Impl::engine_space_for(MemorySpace::host);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    validate_group_config(groups_[g].algorithm(), g, "");
    // LAMB's trust ratio: the engine that updates a param must see all of it, which an
    // offloaded or sharded param's engine does not (yet).
    const bool whole = Impl::needs_param_sums(groups_[g].algorithm());
    const bool matrices = Impl::needs_whole_matrices(groups_[g].algorithm());
    const bool tensors = Impl::needs_whole_tensors(groups_[g].algorithm());  // no pieces (below)
    for (const ParamSpec& p : groups_[g].params())  // blocks of 16 from each piece's start
      KOPT_THROW_IF(whole && !tensors && p.param.is_shard() && p.param.global_offset % 16 != 0,
                    "kopt::HybridOptimizer: parameter '"
                        << p.name << "' of group " << g << " ('"
                        << algorithm_name(groups_[g].algorithm()) << "') is a piece at offset "
                        << p.param.global_offset << " of its tensor: its norm is summed in "
                        << "blocks of 16 elements, so pieces must start at multiples of 16");
    KOPT_THROW_IF(
        whole && groups_[g].placement() == StatePlacement::host && !groups_[g].params().empty(),
        "kopt::HybridOptimizer: group "
            << g << " runs '" << algorithm_name(groups_[g].algorithm())
            << "', whose update needs the norm of each whole param before it; "
            << "offloaded groups (StatePlacement::host) do not run it (parameter '"
            << groups_[g].params().front().name << "'): keep its state with_params");
    // Muon orthogonalizes each param as a whole matrix, Adafactor factors each whole
    // param's second moment: on the engine that holds it (whole: ShardPlan gives it to one
    // rank).
    if (tensors && !groups_[g].params().empty()) {
      const std::string what = "kopt::HybridOptimizer: group " + std::to_string(g) + " runs '" +
                               algorithm_name(groups_[g].algorithm()) +
                               (matrices ? "', which updates each param as a whole matrix; "
                                         : "', which updates each param whole; ");
      KOPT_THROW_IF(groups_[g].placement() == StatePlacement::host,
                    what << "offloaded groups (StatePlacement::host) do not run it (parameter '"
                         << groups_[g].params().front().name << "'): keep its state with_params");
      for (const ParamSpec& p : groups_[g].params()) {
        // A piece the training code cut (pre-sharded) may carry its tensor's shape: it is
        // still not the whole matrix.
        KOPT_THROW_IF(p.param.is_shard(), what << "parameter '" << p.name << "' is "
                                               << describe(p.param)
                                               << ": give the whole tensor (sharding options "
                                                  "cut it where needed)");
        KOPT_THROW_IF(matrices && !p.param.is_matrix(),
                      what << "parameter '" << p.name << "' is " << describe(p.param)
                           << ": give it its 2-D shape (kopt::Tensor::matrix), or put it in a "
                              "group of an elementwise algorithm (AdamW)");
      }
    }
    for (const ParamSpec& p : groups_[g].params()) {
      KOPT_THROW_IF(p.param.is_shard() && !options_.sharding,
                    "kopt::HybridOptimizer: parameter '"
                        << p.name << "' is part of a larger tensor (" << describe(p.param)
                        << "): its grad norm needs the other parts; set HybridOptions::sharding");
      KOPT_THROW_IF(!names.insert(p.name).second, "kopt::HybridOptimizer: parameter name '"
                                                      << p.name << "' is used twice (names are "
                                                      << "unique across all groups)");
      const bool remainder = groups_[g].master() == MasterStorage::remainder;
      KOPT_THROW_IF(remainder && p.param.dtype == DType::f16,
                    "kopt::HybridOptimizer: group " << g << " keeps its masters as remainders "
                                                    << "(MasterStorage::remainder), which need "
                                                    << "bf16 params; parameter '" << p.name
                                                    << "' is f16");
      const bool stochastic = groups_[g].storage().rounding == Rounding::stochastic;
      KOPT_THROW_IF(stochastic && p.param.dtype == DType::f16,
                    "kopt::HybridOptimizer: group " << g << " rounds its updates stochastically "
                                                    << "(Rounding::stochastic), which is of bf16 "
                                                    << "params; parameter '" << p.name
                                                    << "' is f16");
      // Its engine's storage form: an f32 param is its own master, whatever the group says.
      StateStorage storage = groups_[g].storage();
      if (p.param.dtype == DType::f32) {
        storage.master = MasterStorage::f32;
        storage.rounding = Rounding::nearest;
        if (storage.state_rounding == Rounding::nearest) storage.seed = 0;
      }
      Pending item{g, &p, Impl::engine_space_for(p.param.space),  // NotCompiled if missing
                   groups_[g].placement() == StatePlacement::host, storage};
      // Groups of every master form and array dtype may be chosen; LAMB, Muon and
      // Adafactor groups may not (above).
      if (!item.offloaded && item.space != host_space && !whole && !tensors) {
        candidates.push_back(pending.size());
        candidate_bytes.push_back(device_state_bytes(shards_->local_param(pending.size()),
                                                     groups_[g].algorithm(), item.storage));
      }
      pending.push_back(std::move(item));
    }
  }
  const std::vector<bool> chosen = select_offloaded(candidate_bytes, options_.offload);
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (chosen[i]) pending[candidates[i]].offloaded = true;

  // One engine per (execution space, dtype, offloaded, algorithm, storage form).
  std::map<std::tuple<std::string, DType, bool, std::size_t, std::string, std::uint64_t>,
           std::size_t>
      engine_of;
  for (std::size_t ordinal = 0; ordinal < pending.size(); ++ordinal) {
    const Pending& item = pending[ordinal];
    const ParamSpec& p = *item.spec;
    if (!shards_->is_local(ordinal)) {  // another rank's (sharded): no engine here
      where_.emplace(p.name, Placement{kNone, item.group, item.offloaded, ordinal});
      continue;
    }
    const AlgorithmConfig& algorithm = groups_[item.group].algorithm();
    const auto key = std::make_tuple(item.space, p.param.dtype, item.offloaded, algorithm.index(),
                                     Impl::storage_form(item.storage), item.storage.seed);
    auto it = engine_of.find(key);
    if (it == engine_of.end()) {
      it = engine_of.emplace(key, engines_.size()).first;
      engines_.push_back(
          item.offloaded
              ? Impl::make_offload_engine(p.param.space, p.param.dtype, algorithm, options_.offload,
                                          item.storage)
              : Impl::make_engine(p.param.space, p.param.dtype, algorithm, item.storage));
      engine_group_.emplace_back(groups_.size(), kNone);
      engine_params_.emplace_back();
    }
    const std::size_t e = it->second;
    std::size_t& eg = engine_group_[e][item.group];
    if (eg == kNone) eg = engines_[e]->add_group(algorithm);
    engines_[e]->add(p.name, shards_->local_param(ordinal), shards_->local_grad(ordinal), eg);
    engine_params_[e].push_back(ordinal);
    where_.emplace(p.name, Placement{e, item.group, item.offloaded, ordinal});
  }
  // Last, so that a param's own faults (its size, dtype, space) are named first.
  std::vector<Impl::NamedBuffers> buffers;
  for (const Pending& item : pending)
    buffers.push_back({&item.spec->name, item.spec->param, item.spec->grad});
  Impl::check_no_overlaps(buffers, "kopt::HybridOptimizer");
  steps_.assign(pending.size(), 0);
  for (std::size_t i = 0; i < shards_->size(); ++i) null_grads_ += shards_->grad(i).is_null();
  held_arrays_.assign(groups_.size(), 0);
  if (options_.sharding) {  // the same on every rank: the same groups
    sum_offset_.assign(pending.size(), kNone);
    for (std::size_t ordinal = 0; ordinal < pending.size(); ++ordinal) {
      const int k = Impl::param_sums_of(groups_[pending[ordinal].group].algorithm());
      if (k == 0) continue;
      sum_offset_[ordinal] = num_sums_;
      num_sums_ += static_cast<std::size_t>(k);
    }
  }
}

void HybridOptimizer::check_configs_(const char* call) const {
  for (std::size_t g = 0; g < groups_.size(); ++g)
    validate_group_config(groups_[g].algorithm(), g, call);
}

}  // namespace kopt
