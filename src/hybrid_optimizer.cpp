#include <algorithm>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/norm_parts.hpp>
#include <kopt/impl/param_overlaps.hpp>
#include <kopt/impl/profiling.hpp>
#include <kopt/impl/rank_agreement.hpp>
#include <kopt/impl/shard_plan.hpp>
#include <limits>
#include <utility>

namespace kopt {

namespace {
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
}  // namespace

std::vector<Impl::ExactSum> HybridOptimizer::join_param_sums_(double grad_scale) {
  // Per-param sums over pieces on several ranks (LAMB under ZeRO): each engine measures its
  // pieces, every rank gathers every rank's sums and joins them exactly (in any order the
  // same bits: what one process holding the whole param sums). Updates nothing.
  std::vector<Impl::ExactSum> mine(num_sums_), out;
  if (num_sums_ == 0) return mine;
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    const auto k = static_cast<std::size_t>(engines_[e]->param_sums());
    if (k == 0) continue;
    engines_[e]->measure_param_sums(grad_scale, out);
    for (std::size_t i = 0; i < engine_params_[e].size(); ++i)
      for (std::size_t j = 0; j < k; ++j)
        mine[sum_offset_[engine_params_[e][i]] + j].join(out[i * k + j]);
  }
  Communicator& comm = shards_->communicator();
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<Impl::ExactSum> all(num_sums_ * ranks);
  comm.all_gather_bytes(mine.data(), all.data(),
                        std::vector<std::size_t>(ranks, num_sums_ * sizeof(Impl::ExactSum)));
  std::vector<Impl::ExactSum> joined(num_sums_);
  for (std::size_t r = 0; r < ranks; ++r)
    for (std::size_t j = 0; j < num_sums_; ++j) joined[j].join(all[r * num_sums_ + j]);
  return joined;
}

void HybridOptimizer::step_engines_(double grad_scale, const std::vector<Impl::ExactSum>& sums) {
  std::vector<Impl::ExactSum> mine;
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    const auto k = static_cast<std::size_t>(engines_[e]->param_sums());
    if (num_sums_ == 0 || k == 0) {
      engines_[e]->step(grad_scale);
      continue;
    }
    mine.assign(engine_params_[e].size() * k, Impl::ExactSum());
    for (std::size_t i = 0; i < engine_params_[e].size(); ++i)
      for (std::size_t j = 0; j < k; ++j)
        mine[i * k + j] = sums[sum_offset_[engine_params_[e][i]] + j];
    engines_[e]->step_with_sums(grad_scale, mine);
  }
}

HybridOptimizer::~HybridOptimizer() = default;
HybridOptimizer::HybridOptimizer(HybridOptimizer&&) noexcept = default;
HybridOptimizer& HybridOptimizer::operator=(HybridOptimizer&&) noexcept = default;

std::vector<std::string> HybridOptimizer::Group::names() const {
  std::vector<std::string> out;
  for (const ParamSpec& p : group_->params()) out.push_back(p.name);
  return out;
}

HybridOptimizer::Group HybridOptimizer::group(std::size_t i) {
  check_alive_("group");
  KOPT_THROW_IF(i >= groups_.size(), "kopt::HybridOptimizer: group " << i << " does not exist ("
                                                                     << groups_.size()
                                                                     << " groups)");
  return Group(&groups_[i]);
}

const HybridOptimizer::Placement& HybridOptimizer::find_(const std::string& name) const {
  if (!alive_.yes) check_alive_(("call naming '" + name + "'").c_str());
  const auto it = where_.find(name);
  KOPT_THROW_IF(it == where_.end(), "kopt::HybridOptimizer: no parameter named '" << name << "'");
  return it->second;
}

void HybridOptimizer::check_alive_(const char* call) const {
  KOPT_THROW_IF_AS(InvalidArgument, !alive_.yes,
                   "kopt::HybridOptimizer::" << call << ": this optimizer was moved from; it "
                                             << "holds no params or state");
}

void HybridOptimizer::check_consistent_(const char* call) const {
  check_alive_(call);
  KOPT_THROW_IF_AS(InconsistentState, !failed_step_.empty(),
                   "kopt::HybridOptimizer::" << call << ": refused: " << failed_step_
                                             << "; load() a checkpoint to continue");
}

StepStats HybridOptimizer::step() {
  Impl::require_kokkos("kopt::HybridOptimizer::step");
  const Impl::ProfilingRegion region(Impl::regions::step);
  // Everything that can fail for a reason other than a backend error runs before the first
  // update starts (configs, allocations, collectives), and changes no value: a throw there
  // leaves params, state, step counts and loss scale as they were, on every rank.
  if (Communicator* peers = peers_()) {
    const std::exception_ptr failed = Impl::outcome_of([&] { prepare_step_(); });
    Impl::agree_across_ranks(*peers, "kopt::HybridOptimizer::step", failed,
                             Impl::group_configs(groups_) + null_grad_lines_());
  } else {
    prepare_step_();
  }
  // An array a group's config switches off later keeps its values (the engines keep it),
  // and checkpoints save it (torch keeps such a state entry too).
  for (std::size_t g = 0; g < groups_.size(); ++g)
    held_arrays_[g] |= Impl::arrays_of(groups_[g].algorithm());

  const double scale = scaler_ ? scaler_->scale() : 1.0;
  StepStats stats{std::numeric_limits<double>::quiet_NaN(), 1.0, false, scale};
  shards_->reduce_grads();  // ZeRO-2: into the reduce buffers
  if (options_.max_grad_norm || scaler_) {
    // One pass per engine where its grads live. Each canonical block of a param is summed
    // in one fixed order and the block sums are added exactly; blocks cut between engines
    // or ranks are reassembled first. So every rank decides the same, and the norm has the
    // same bits for every grouping, order, placement, thread count and world size.
    Impl::NormParts total, parts;
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      engines_[e]->grad_norm_parts(parts);
      total.sum.join(parts.sum);
      for (Impl::NormFragment f : parts.fragments) {
        f.param = engine_params_[e][f.param];  // the ordinal: the same on every rank
        total.fragments.push_back(f);
      }
    }
    Impl::gather_norm_parts(shards_->communicator(), total);  // nothing in a world of one
    Impl::add_fragment_blocks(total);
    const double sum_sq = total.sum.value();
    stats.grad_norm = std::sqrt(sum_sq) / scale;
    if (!std::isfinite(sum_sq)) return skip_(stats);  // an Inf or NaN somewhere
    if (options_.max_grad_norm)
      stats.clip_factor = std::min(1.0, *options_.max_grad_norm / (stats.grad_norm + 1e-6));
    // A loss scale below 1 may unscale a finite grad past fp32's range, where torch's
    // GradScaler (unscaling in fp32) finds an Inf and skips: so does kopt, when the norm of
    // the unscaled, clipped grads is past it (every element is at most the norm).
    if (scaler_ && !(stats.grad_norm * stats.clip_factor <= std::numeric_limits<float>::max()))
      return skip_(stats);
  }
  const double grad_scale = stats.clip_factor / scale;  // unscale and clip, fused
  // The kernels take the factor as a float: a loss scale so small that 1 / scale overflows
  // it would turn zero grads into NaN params. Such a step is skipped like an overflow.
  if (!(grad_scale <= std::numeric_limits<float>::max())) return skip_(stats);

  const std::vector<Impl::ExactSum> param_sums = join_param_sums_(grad_scale);  // collective

  // From here a failure may leave some params updated and others not: the optimizer
  // remembers it and refuses to go on (or to overwrite a good checkpoint) until load().
  try {
    step_engines_(grad_scale, param_sums);
    for (const auto& engine : engines_) engine->fence();
    shards_->gather_params();
    if (null_grads_ == 0) {
      for (std::int64_t& count : steps_) ++count;
    } else {
      for (std::size_t i = 0; i < shards_->size(); ++i)
        if (!shards_->grad(i).is_null()) ++steps_[i];
    }
  } catch (...) {
    failed_step_ = "a step failed after its update began (" + Impl::what_of_current() + ")";
    for (const auto& engine : engines_) {
      try {
        engine->fence();  // let launched work finish before the caller frees anything
      } catch (...) {
      }
    }
    throw;
  }
  if (scaler_) scaler_->update(true);
  stats.loss_scale = loss_scale();
  return stats;
}

void HybridOptimizer::prepare_step_() {
  check_consistent_("step");
  check_configs_("step");
  for (std::size_t e = 0; e < engines_.size(); ++e)
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (engine_group_[e][g] != kNone)
        engines_[e]->set_config(engine_group_[e][g], groups_[g].algorithm());
  for (const auto& engine : engines_) engine->prepare_step();
}

std::string HybridOptimizer::null_grad_lines_() const {
  std::string lines;
  if (null_grads_ == 0) return lines;
  std::size_t ordinal = 0;
  for (const ParamGroup& g : groups_)
    for (const ParamSpec& p : g.params())
      if (shards_->grad(ordinal++).is_null()) lines += "param '" + p.name + "': null grad\n";
  return lines;
}

StepStats HybridOptimizer::skip_(StepStats stats) {
  stats.skipped = true;
  if (scaler_) scaler_->update(false);
  stats.loss_scale = loss_scale();
  return stats;
}

void HybridOptimizer::set_grad(const std::string& name, const Tensor& grad) {
  const Placement& at = find_(name);
  // The whole grad is checked on every rank; the engine gets (and checks) this rank's piece.
  const Tensor param = shards_->param(at.ordinal);
  shards_->check(at.ordinal, param, grad);
  // Against its own param only: against every param it would cost O(params) per call.
  Impl::check_no_overlaps_with({&name, param, grad}, {}, "kopt::HybridOptimizer::set_grad");
  if (at.engine != kNone)
    engines_[at.engine]->set_grad(name, shards_->local_grad(at.ordinal, grad));
  set_shard_(at.ordinal, param, grad);
}

void HybridOptimizer::set_shard_(std::size_t ordinal, const Tensor& param, const Tensor& grad) {
  const bool was_null = shards_->grad(ordinal).is_null();
  shards_->set(ordinal, param, grad);
  null_grads_ = null_grads_ + grad.is_null() - was_null;
}

void HybridOptimizer::rebind(const std::string& name, const Tensor& param, const Tensor& grad) {
  const Placement& at = find_(name);
  shards_->check(at.ordinal, param, grad);
  // Memory of the param's size and dtype only: the engine names any other fault first.
  const Tensor& now = shards_->param(at.ordinal);
  if (param.numel == now.numel && param.dtype == now.dtype &&
      (grad.is_null() || grad.numel == now.numel)) {
    std::vector<Impl::NamedBuffers> others;  // O(params): rebind is not a per-step call
    for (const auto& [other, where] : where_)
      others.push_back({&other, shards_->param(where.ordinal), shards_->grad(where.ordinal)});
    Impl::check_no_overlaps_with({&name, param, grad}, others, "kopt::HybridOptimizer::rebind");
  }
  if (at.engine != kNone) {
    Impl::Engine& engine = *engines_[at.engine];
    const std::string space = Impl::engine_space_for(param.space);
    KOPT_THROW_IF(space != engine.space_name(),
                  "kopt::HybridOptimizer: rebind of '"
                      << name << "' to memory space '" << name_of(param.space)
                      << "' would move it from " << engine.space_name() << " to " << space
                      << "; rebind replaces memory in place");
    engine.rebind(name, shards_->local(at.ordinal, param), shards_->local_grad(at.ordinal, grad));
  }
  set_shard_(at.ordinal, param, grad);
}

void HybridOptimizer::reload_model_params() {
  Impl::require_kokkos("kopt::HybridOptimizer::reload_model_params");
  check_consistent_("reload_model_params");
  for (const auto& engine : engines_) engine->reload_model_params();
  for (const auto& engine : engines_) engine->fence();
}

double HybridOptimizer::loss_scale() const {
  check_alive_("loss_scale");
  return scaler_ ? scaler_->scale() : 1.0;
}

std::int64_t HybridOptimizer::step_count(const std::string& name) const {
  const Placement& at = find_(name);
  return steps_[at.ordinal];
}

std::map<std::string, std::size_t> HybridOptimizer::state_bytes() const {
  std::map<std::string, std::size_t> bytes;
  for (const auto& engine : engines_) bytes[engine->state_space_name()] += engine->state_bytes();
  return bytes;
}

std::map<std::string, std::size_t> HybridOptimizer::workspace_bytes() const {
  std::map<std::string, std::size_t> bytes;
  for (const auto& engine : engines_) engine->add_workspace_bytes(bytes);
  return bytes;
}

}  // namespace kopt
