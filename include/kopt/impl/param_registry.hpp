#pragma once
/// \file
/// Host-side bookkeeping shared by every engine: parameter names, groups and their configs,
/// tensors, per-parameter step counts and where each parameter's state sits in the engine's
/// buffers. Compiled once (src/param_registry.cpp); holds no device memory.

#include <algorithm>
#include <cstdint>
#include <kopt/algorithm_config.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace kopt::Impl {

/// A set of MemorySpace values, as a bit mask.
using SpaceMask = unsigned;
constexpr SpaceMask mask_of(MemorySpace s) { return 1u << static_cast<unsigned>(s); }

/// Whether an engine can update params of `dtype` (its kernels are instantiated for it).
bool is_update_dtype(DType dtype);

/// The checks every tensor handed to kopt passes, whoever takes it: numel >= 0, not null
/// when it has elements, a dtype kopt updates, numel * element size fits in 63 bits, and
/// shard metadata inside its global tensor. Messages start with `owner` and name the param.
void check_tensor_fields(const std::string& owner, const std::string& name, const char* what,
                         const Tensor& t);

struct ParamEntry {
  std::string name;
  Tensor param;
  Tensor grad;  ///< data == nullptr: no gradient this step
  std::size_t group = 0;
  std::int64_t state_offset = -1;   ///< into the moment buffers; -1 until laid out
  std::int64_t master_offset = -1;  ///< into the master buffer; -1 for fp32 params
};

class ParamRegistry {
 public:
  /// `accepted`: the memory spaces the owning engine's execution space can read and write.
  ParamRegistry(SpaceMask accepted, std::string owner);

  std::size_t add_group(const AlgorithmConfig& config);  ///< validates first
  std::size_t num_groups() const { return configs_.size(); }
  AlgorithmConfig& config(std::size_t group);
  const AlgorithmConfig& config(std::size_t group) const;
  /// Validates everything, then appends; throws (changing nothing) on bad input.
  void add(const std::string& name, const Tensor& param, const Tensor& grad, std::size_t group);
  /// Replaces the grad of `name` (null Tensor: no gradient this step); validates first.
  void set_grad(const std::string& name, const Tensor& grad);
  /// Points `name` at new memory (same numel, dtype and reachability), keeping its state.
  void rebind(const std::string& name, const Tensor& param, const Tensor& grad);
  /// Validates every group's config; throws naming the group on the first bad one.
  void validate_configs() const;
  /// State arrays (bit k: the algorithm's array k) the engine keeps from now on whatever
  /// the configs say: a checkpoint restores an array a config has switched off since.
  void hold_arrays(unsigned arrays) { held_ |= arrays; }
  unsigned held_arrays() const { return held_; }
  /// Changes whenever a param is added or an entry's param or grad tensor changes (set_grad
  /// and rebind with other memory): engines keep their step plans while it stays the same.
  std::uint64_t version() const { return version_; }

  std::size_t size() const { return entries_.size(); }
  const ParamEntry& operator[](std::size_t i) const { return entries_[i]; }
  ParamEntry& operator[](std::size_t i) { return entries_[i]; }
  /// Position of `name`; throws kopt::InvalidArgument naming it when unknown.
  std::size_t index_of(const std::string& name) const;

  // Each entry's progress, kept apart from the entries in two compact arrays: a step over
  // 100,000 params then writes 0.9 MB, not a cache line per entry (1 ms a step here).
  /// Completed updates of entry i.
  std::int64_t step(std::size_t i) const { return steps_[i]; }
  /// Whether entry i's master is to be reconciled with its param before its next update
  /// (see Impl::synced_master): set when added, loaded or reloaded, cleared by the update.
  /// Until then the training code may write the param and the master follows.
  bool sync_master(std::size_t i) const { return sync_[i] != 0; }
  /// Entry i completed one update: its step count + 1, and its master leads from now on.
  void advance(std::size_t i) {
    ++steps_[i];
    sync_[i] = 0;
  }
  /// Entry i's state was loaded with step count `step`: its master is reconciled next.
  void set_loaded(std::size_t i, std::int64_t step) {
    steps_[i] = step;
    sync_[i] = 1;
  }
  /// New weights in every param: every master is reconciled at its next update.
  void reload_all() { std::fill(sync_.begin(), sync_.end(), char{1}); }

  /// Assigns buffer offsets to entries not laid out yet (appended after the existing ones,
  /// so existing state keeps its place), each on a multiple of `alignment` elements (16, or
  /// q8_block for an engine with q8 arrays, whose blocks then never span two params).
  /// Returns {moment elements, master elements}.
  std::pair<std::int64_t, std::int64_t> lay_out(std::int64_t alignment = 16);
  /// Entries from this index on were laid out by the last lay_out() call.
  std::size_t first_new() const { return first_new_; }

 private:
  void check_tensor_(const std::string& name, const char* what, const Tensor& t) const;
  void check_grad_(const std::string& name, const Tensor& param, const Tensor& grad) const;

  SpaceMask accepted_;
  std::string owner_;
  std::vector<AlgorithmConfig> configs_;
  std::vector<ParamEntry> entries_;
  std::vector<std::int64_t> steps_;  ///< per entry, see step()
  std::vector<char> sync_;           ///< per entry, see sync_master()
  std::unordered_map<std::string, std::size_t> index_;
  std::int64_t moment_elems_ = 0;
  std::int64_t master_elems_ = 0;
  std::size_t laid_out_ = 0;
  std::size_t first_new_ = 0;
  std::uint64_t version_ = 0;
  unsigned held_ = 0;             ///< see hold_arrays()
  std::int64_t total_elems_ = 0;  ///< padded numel of every entry, laid out or not
};

/// The state arrays the groups of `registry` keep (bit k: array k of their algorithm), and
/// those it was told to hold.
inline unsigned arrays_needed(const ParamRegistry& registry) {
  unsigned needed = registry.held_arrays();
  for (std::size_t g = 0; g < registry.num_groups(); ++g) needed |= arrays_of(registry.config(g));
  return needed;
}

}  // namespace kopt::Impl
