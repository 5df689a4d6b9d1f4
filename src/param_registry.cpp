#include <kopt/error.hpp>
#include <kopt/impl/param_registry.hpp>
#include <limits>
#include <utility>

namespace kopt::Impl {

namespace {
/// Every field the engines' plans read (memory, size, dtype, space, shard placement, shape).
bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.data == b.data && a.numel == b.numel && a.dtype == b.dtype && a.space == b.space &&
         a.global_numel == b.global_numel && a.global_offset == b.global_offset &&
         a.rows == b.rows && a.cols == b.cols;
}
}  // namespace

bool is_update_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

ParamRegistry::ParamRegistry(SpaceMask accepted, std::string owner)
    : accepted_(accepted), owner_(std::move(owner)) {}

std::size_t ParamRegistry::add_group(const AlgorithmConfig& config) {
  kopt::validate(config);
  configs_.push_back(config);
  return configs_.size() - 1;
}

AlgorithmConfig& ParamRegistry::config(std::size_t group) {
  KOPT_THROW_IF(group >= configs_.size(), owner_ << ": group " << group << " does not exist ("
                                                 << configs_.size() << " groups)");
  return configs_[group];
}

const AlgorithmConfig& ParamRegistry::config(std::size_t group) const {
  return const_cast<ParamRegistry*>(this)->config(group);
}

void check_tensor_fields(const std::string& owner, const std::string& name, const char* what,
                         const Tensor& t) {
  KOPT_THROW_IF(t.numel < 0,
                owner << ": " << what << " of '" << name << "' has negative numel " << t.numel);
  KOPT_THROW_IF(t.data == nullptr && t.numel > 0, owner << ": " << what << " of '" << name
                                                        << "' is a null pointer with numel "
                                                        << t.numel);
  KOPT_THROW_IF(!is_update_dtype(t.dtype),
                owner << ": " << what << " of '" << name << "' has dtype " << name_of(t.dtype)
                      << ", which kopt does not update (f32, bf16, f16)");
  // An unknown space is bad input, not a space this build lacks (NotCompiled).
  KOPT_THROW_IF(
      static_cast<unsigned>(t.space) > static_cast<unsigned>(MemorySpace::cuda_host_pinned),
      owner << ": " << what << " of '" << name << "' has memory space "
            << static_cast<unsigned>(t.space) << ", which is not a kopt::MemorySpace");
  const auto max_numel =
      static_cast<std::int64_t>(std::numeric_limits<std::int64_t>::max() / size_of(t.dtype));
  KOPT_THROW_IF(t.numel > max_numel, owner << ": " << what << " of '" << name << "' has numel "
                                           << t.numel << ": numel * " << size_of(t.dtype)
                                           << " bytes overflows");
  KOPT_THROW_IF(t.is_shard() && (t.global_offset < 0 || t.global_offset > t.global_numel - t.numel),
                owner << ": " << what << " of '" << name << "' claims elements [" << t.global_offset
                      << ", " << t.global_offset << " + " << t.numel << ") of a tensor of "
                      << t.global_numel << " (global_offset + numel > global_numel)");
}

void ParamRegistry::check_tensor_(const std::string& name, const char* what,
                                  const Tensor& t) const {
  check_tensor_fields(owner_, name, what, t);
  KOPT_THROW_IF_AS(NotCompiled, (accepted_ & mask_of(t.space)) == 0,
                   owner_ << ": " << what << " of '" << name << "' lives in memory space '"
                          << name_of(t.space) << "', which this engine cannot reach");
}

void ParamRegistry::check_grad_(const std::string& name, const Tensor& param,
                                const Tensor& grad) const {
  if (grad.data == nullptr && grad.numel == 0) return;  // no gradient this step
  check_tensor_(name, "grad", grad);
  KOPT_THROW_IF_AS(ShapeMismatch, grad.numel != param.numel,
                   owner_ << ": grad of '" << name << "' has " << grad.numel
                          << " elements but the param has " << param.numel);
}

void ParamRegistry::add(const std::string& name, const Tensor& param, const Tensor& grad,
                        std::size_t group) {
  KOPT_THROW_IF(name.empty(), owner_ << ": a parameter needs a non-empty name");
  KOPT_THROW_IF(index_.count(name) != 0,
                owner_ << ": parameter name '" << name << "' is already registered");
  KOPT_THROW_IF(group >= configs_.size(), owner_ << ": parameter '" << name << "' names group "
                                                 << group << " but there are " << configs_.size()
                                                 << " groups");
  check_tensor_(name, "param", param);
  check_grad_(name, param, grad);
  // The state buffers hold every param's padded numel: their byte offsets must fit a pointer
  // offset, checked here, before any offset is computed (numel * 4 fits 63 bits already).
  constexpr std::int64_t max_elems = std::numeric_limits<std::ptrdiff_t>::max() / 4;
  const std::int64_t padded = (param.numel + 15) / 16 * 16;
  KOPT_THROW_IF(padded > max_elems - total_elems_,
                owner_ << ": parameter '" << name << "' (" << param.numel
                       << " elements) takes the optimizer state past " << max_elems
                       << " elements, more than a pointer offset can address");
  ParamEntry entry;
  entry.name = name;
  entry.param = param;
  entry.grad = grad;
  entry.group = group;
  // The only steps that may throw come first; capacity doubles (reserve(size + 1) would
  // copy the arrays at every add: quadratic in the number of params).
  if (steps_.size() == steps_.capacity()) steps_.reserve(2 * steps_.size() + 16);
  if (sync_.size() == sync_.capacity()) sync_.reserve(2 * sync_.size() + 16);
  entries_.push_back(std::move(entry));
  try {
    index_.emplace(name, entries_.size() - 1);
  } catch (...) {
    entries_.pop_back();  // leave the registry as it was
    throw;
  }
  steps_.push_back(0);
  sync_.push_back(1);
  total_elems_ += padded;
  ++version_;
}

void ParamRegistry::set_grad(const std::string& name, const Tensor& grad) {
  ParamEntry& entry = entries_[index_of(name)];
  check_grad_(name, entry.param, grad);
  if (!same_tensor(entry.grad, grad)) ++version_;
  entry.grad = grad;
}

void ParamRegistry::rebind(const std::string& name, const Tensor& param, const Tensor& grad) {
  ParamEntry& entry = entries_[index_of(name)];
  check_tensor_(name, "param", param);
  KOPT_THROW_IF_AS(ShapeMismatch, param.numel != entry.param.numel,
                   owner_ << ": rebind of '" << name << "' to " << param.numel
                          << " elements; it has " << entry.param.numel
                          << " (rebind replaces memory, not shape)");
  KOPT_THROW_IF(param.dtype != entry.param.dtype, owner_ << ": rebind of '" << name << "' to dtype "
                                                         << name_of(param.dtype) << "; it is "
                                                         << name_of(entry.param.dtype));
  // A piece (shard_of) stays where it was: stochastic rounding and checkpoints key by it.
  const bool moved = param.global_numel != entry.param.global_numel ||
                     param.global_offset != entry.param.global_offset;
  KOPT_THROW_IF_AS(ShapeMismatch,
                   moved || (param.is_matrix() && entry.param.is_matrix() &&
                             (param.rows != entry.param.rows || param.cols != entry.param.cols)),
                   owner_ << ": rebind of '" << name << "' to " << describe(param) << "; it is "
                          << describe(entry.param) << " (rebind replaces memory, not shape)");
  check_grad_(name, param, grad);
  Tensor kept = param;  // a tensor without a shape keeps the registered one
  if (!param.is_matrix()) kept.rows = entry.param.rows, kept.cols = entry.param.cols;
  if (!same_tensor(entry.param, kept) || !same_tensor(entry.grad, grad)) ++version_;
  entry.param = kept;
  entry.grad = grad;
}

void ParamRegistry::validate_configs() const {
  for (std::size_t g = 0; g < configs_.size(); ++g) {
    try {
      kopt::validate(configs_[g]);
    } catch (const InvalidArgument& e) {
      KOPT_THROW_IF(true, owner_ << ": group " << g << ": " << Impl::embedded(e.what()));
    }
  }
}

std::size_t ParamRegistry::index_of(const std::string& name) const {
  const auto it = index_.find(name);
  KOPT_THROW_IF(it == index_.end(), owner_ << ": no parameter named '" << name << "'");
  return it->second;
}

std::pair<std::int64_t, std::int64_t> ParamRegistry::lay_out(std::int64_t alignment) {
  // Every param's state starts on a 64-byte boundary (16 floats) at least: vector loads of a
  // small tensor's state then never straddle cache lines, which costs ~20% on many small
  // tensors.
  const auto padded = [&](std::int64_t n) { return (n + alignment - 1) / alignment * alignment; };
  first_new_ = laid_out_;
  for (; laid_out_ < entries_.size(); ++laid_out_) {
    ParamEntry& e = entries_[laid_out_];
    e.state_offset = moment_elems_;
    moment_elems_ += padded(e.param.numel);
    if (e.param.dtype != DType::f32) {
      e.master_offset = master_elems_;
      master_elems_ += padded(e.param.numel);
    }
  }
  return {moment_elems_, master_elems_};
}

}  // namespace kopt::Impl
