#pragma once
/// \file
/// The type-erased engine the HybridOptimizer runs: the work of one (execution space,
/// param dtype, algorithm). EngineFor<ExecSpace, Policy> adapts kopt::FusedOptimizer;
/// src/engine_dispatch.cpp is the one place that picks the execution space for a memory
/// space.

#include <array>
#include <kopt/fused_optimizer.hpp>
#include <kopt/impl/state_arrays.hpp>
#include <kopt/offload_options.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kopt::Impl {

/// Host arrays of `count` floats for elements [offset, offset + count) of one param's state
/// (the engine's piece of it when sharded), indexed by StateArray; a null array is skipped.
/// Checkpoints move state through these a bounded span at a time, never a whole param at once.
template <class T>
struct StateSpan {
  std::int64_t offset = 0, count = 0;
  StateArrays<T> arrays{};
};

class Engine {
 public:
  virtual ~Engine() = default;
  /// Adds a group; its config must be of the engine's algorithm (else InvalidArgument).
  virtual std::size_t add_group(const AlgorithmConfig& config) = 0;
  /// Replaces a group's config (schedules) with one of the same algorithm.
  virtual void set_config(std::size_t group, const AlgorithmConfig& config) = 0;
  /// The algorithm's name (Policy::name).
  virtual const char* algorithm() const = 0;
  virtual void add(const std::string& name, const Tensor& param, const Tensor& grad,
                   std::size_t group) = 0;
  virtual void set_grad(const std::string& name, const Tensor& grad) = 0;
  virtual void rebind(const std::string& name, const Tensor& param, const Tensor& grad) = 0;
  /// The grads' sum of squares, computed where they live: the exact sum over whole blocks
  /// and the fragments of cut blocks, whose `param` is the index of the param in the order
  /// they were added to this engine. Blocks.
  virtual void grad_norm_parts(NormParts& out) = 0;
  /// Allocates and plans everything the next step() needs (state of new params, chunk
  /// tables); on failure nothing changed. After it, step() only launches work.
  virtual void prepare_step() = 0;
  virtual void step(double grad_scale) = 0;
  /// Per-param sums (LAMB): how many per param (0: none), this engine's part of them, and
  /// the step that takes them joined over every rank (FusedOptimizer::measure_param_sums).
  virtual int param_sums() const { return 0; }
  virtual void measure_param_sums(double, std::vector<ExactSum>& out) { out.clear(); }
  virtual void step_with_sums(double grad_scale, const std::vector<ExactSum>&) { step(grad_scale); }
  virtual void reload_model_params() = 0;
  virtual void fence() = 0;
  virtual std::int64_t step_count(const std::string& name) const = 0;
  virtual std::size_t state_bytes() const = 0;
  /// Adds what it keeps allocated besides its state to `bytes`, per execution space name
  /// whose memory holds it (HybridOptimizer::workspace_bytes).
  virtual void add_workspace_bytes(std::map<std::string, std::size_t>& bytes) const = 0;
  /// Copies a span of the state of `name` to the host (FusedAdam::read_state: a max the
  /// engine does not keep reads as zeros, an f32 param has no master, a master still to be
  /// reconciled reads as its next update would take it). Blocks.
  virtual void read_state(const std::string& name, const StateSpan<float>& out) = 0;
  /// Overwrites a span of the state of `name` (FusedAdam::write_state). Blocks.
  virtual void write_state(const std::string& name, const StateSpan<const float>& in) = 0;
  /// After write_state of its spans: the step count of `name`, and its master flagged to be
  /// reconciled with the param at its next update (weights may be loaded before or after).
  virtual void commit_state(const std::string& name, std::int64_t step) = 0;
  /// The per-param state of `name` (not per element: Adafactor's statistics), as host
  /// floats; empty where the algorithm keeps none (FusedOptimizer::tensor_state). Blocks.
  virtual std::vector<float> tensor_state(const std::string&) { return {}; }
  /// Overwrites it; `values` must have tensor_state()'s size (else InvalidArgument, nothing
  /// changed). Blocks.
  virtual void set_tensor_state(const std::string& name, const std::vector<float>& values) {
    KOPT_THROW_IF(!values.empty(), "kopt: parameter '" << name << "' keeps no per-param state ("
                                                       << values.size() << " floats given)");
  }
  /// Keeps the algorithm's state arrays in `arrays` (bit k: array k) from the next
  /// prepare_step() on, whatever the configs say (FusedOptimizer::keep_state_arrays).
  virtual void keep_state_arrays(unsigned arrays) = 0;
  /// The arrays it holds now (FusedOptimizer::held_state_arrays).
  virtual unsigned held_state_arrays() const = 0;
  /// The execution space that serves the params' memory: "OpenMP", "Cuda", ...
  virtual const char* space_name() const = 0;
  /// The execution space whose memory holds the optimizer state (the host's for offload).
  virtual const char* state_space_name() const { return space_name(); }
};

/// `config` as the config of `Policy`; throws InvalidArgument naming both algorithms when
/// it is another's.
/// How many per-param sums a group with `config` needs before its update (LAMB: 2).
inline int param_sums_of(const AlgorithmConfig& config) {
  return std::visit(
      [](const auto& c) {
        using P = typename std::decay_t<decltype(c)>::Policy;
        if constexpr (has_tensor_sums<P>)
          return P::tensor_sums;
        else
          return 0;
      },
      config);
}

template <class Policy>
const typename Policy::Config& config_of(const AlgorithmConfig& config, const std::string& owner) {
  const auto* c = std::get_if<typename Policy::Config>(&config);
  KOPT_THROW_IF(c == nullptr, owner << ": a group of algorithm '" << algorithm_name(config)
                                    << "' in an engine of '" << Policy::name << "'");
  return *c;
}

template <class ExecSpace, class Policy>
class EngineFor final : public Engine {
 public:
  EngineFor(const ExecSpace& exec, const std::string& label, const StateStorage& storage)
      : opt_(exec, {}, label, storage) {}
  std::size_t add_group(const AlgorithmConfig& config) override {
    const auto& c = config_of<Policy>(config, opt_.label());
    // The engine is built with one placeholder group 0; the first real group takes it over.
    if (!has_groups_) {
      c.validate();
      has_groups_ = true;
      opt_.config(0) = c;
      return 0;
    }
    return opt_.add_group(c);
  }
  void set_config(std::size_t group, const AlgorithmConfig& config) override {
    opt_.config(group) = config_of<Policy>(config, opt_.label());
  }
  const char* algorithm() const override { return Policy::name; }
  void add(const std::string& name, const Tensor& param, const Tensor& grad,
           std::size_t group) override {
    opt_.add(name, param, grad, group);
  }
  void set_grad(const std::string& name, const Tensor& grad) override { opt_.set_grad(name, grad); }
  void rebind(const std::string& name, const Tensor& param, const Tensor& grad) override {
    opt_.rebind(name, param, grad);
  }
  void grad_norm_parts(NormParts& out) override { opt_.grad_norm_parts(out); }
  void prepare_step() override { opt_.prepare_step(); }
  void step(double grad_scale) override { opt_.step(grad_scale); }
  int param_sums() const override {
    if constexpr (has_tensor_sums<Policy>)
      return Policy::tensor_sums;
    else
      return 0;
  }
  void measure_param_sums(double grad_scale, std::vector<ExactSum>& out) override {
    opt_.measure_param_sums(grad_scale, out);
  }
  void step_with_sums(double grad_scale, const std::vector<ExactSum>& sums) override {
    opt_.step(grad_scale, &sums);
  }
  void reload_model_params() override { opt_.reload_model_params(); }
  void fence() override { Impl::fence(opt_.exec(), "kopt::HybridOptimizer::fence"); }
  std::int64_t step_count(const std::string& name) const override { return opt_.step_count(name); }
  std::size_t state_bytes() const override { return opt_.state_bytes(); }
  void add_workspace_bytes(std::map<std::string, std::size_t>& bytes) const override {
    bytes[ExecSpace::name()] += opt_.workspace_bytes();
  }
  void keep_state_arrays(unsigned arrays) override { opt_.keep_state_arrays(arrays); }
  unsigned held_state_arrays() const override { return opt_.held_state_arrays(); }
  const char* space_name() const override { return ExecSpace::name(); }
  void read_state(const std::string& name, const StateSpan<float>& out) override {
    opt_.read_state(name, out.offset, out.count, out.arrays);
  }
  void write_state(const std::string& name, const StateSpan<const float>& in) override {
    opt_.write_state(name, in.offset, in.count, in.arrays);
  }
  void commit_state(const std::string& name, std::int64_t step) override {
    opt_.commit_state(name, step);
  }
  std::vector<float> tensor_state(const std::string& name) override {
    return opt_.tensor_state(name);
  }
  void set_tensor_state(const std::string& name, const std::vector<float>& values) override {
    opt_.set_tensor_state(name, values);
  }

 private:
  FusedOptimizer<ExecSpace, Policy> opt_;
  bool has_groups_ = false;
};

/// A fused engine of algorithm `algorithm` (an AlgorithmConfig index) on `exec`, for the
/// spaces this build has (instantiated in backends/<space>/fused_<space>.cpp).
template <class ExecSpace>
std::unique_ptr<Engine> make_fused_engine(const ExecSpace& exec, std::size_t algorithm,
                                          const std::string& label, const StateStorage& storage);

/// An engine of `algorithm` for params in `space` of `dtype`, on the execution space that serves
/// that memory: host (and pinned) memory on the host space (OpenMP when enabled), device and UVM
/// memory on the device space. Throws kopt::NotCompiled naming the space when this build
/// has no execution space for it. `storage`: how it stores the state.
std::unique_ptr<Engine> make_engine(MemorySpace space, DType dtype,
                                    const AlgorithmConfig& algorithm,
                                    const StateStorage& storage = {});

/// A storage form as the engines' labels show it (",master remainder,bf16 state"; "" for the
/// default); equal forms give equal strings, so it also keys the engines of a HybridOptimizer
/// (with the seed, which it leaves out).
std::string storage_form(const StateStorage& storage);

/// The name of the execution space make_engine picks for `space` (for grouping).
const char* engine_space_for(MemorySpace space);

/// An offload engine for params in `space` (device params, host state): the pipeline runs
/// on CUDA streams for CUDA memory, on host worker threads for host memory; `storage`: fp32
/// masters, state arrays of any dtype. Throws kopt::NotCompiled like make_engine.
std::unique_ptr<Engine> make_offload_engine(MemorySpace space, DType dtype,
                                            const AlgorithmConfig& algorithm,
                                            const OffloadOptions& options,
                                            const StateStorage& storage = {});

/// `bytes` bytes of kopt's own in `space`, freed with the last copy of the pointer.
std::shared_ptr<void> allocate_bytes(MemorySpace space, std::size_t bytes,
                                     const std::string& label);

}  // namespace kopt::Impl
