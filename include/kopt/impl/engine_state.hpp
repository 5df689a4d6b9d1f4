#pragma once
/// \file
/// What the local engine (kopt::FusedOptimizer) and the offload engine both own, written
/// once: an algorithm's state arrays and the fp32 masters in one memory space, grown as
/// params are added, moved to and from the host a span at a time (checkpoints), and the
/// kernel class each param falls in. The engines add only what truly differs: where the
/// update runs and how params and grads get there.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <kopt/compat.hpp>
#include <kopt/error.hpp>
#include <kopt/impl/loaded_ties.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/impl/plan_stamp.hpp>
#include <kopt/impl/state_arrays.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <kopt/state_storage.hpp>
#include <string>
#include <variant>
#include <vector>

namespace kopt::Impl {

/// Which params have an fp32 master, and where: the local engine keeps one per 16-bit param
/// (ParamEntry::master_offset; an f32 param is its own master), the offload engine one per
/// param at its state offset (an f32 param's host copy; not part of its state). Masters of
/// other forms (remainders; none) are of 16-bit params only, at either place.
enum class Masters { of_16_bit_params, of_every_param };

template <class MemSpace, class Policy>
class EngineState {
 public:
  using FloatView = Kokkos::View<float*, MemSpace>;
  using RemainderView = Kokkos::View<std::uint16_t*, MemSpace>;
  using Bf16View = Kokkos::View<bfloat16*, MemSpace>;
  using F16View = Kokkos::View<float16*, MemSpace>;
  /// A q8 array's blocks (kopt/impl/block_q8.hpp), as bytes.
  using Q8View = Kokkos::View<unsigned char*, MemSpace>;

  /// `storage`: how the state is held (validated).
  EngineState(std::string label, Masters masters, const StateStorage& storage = {})
      : label_(std::move(label)), masters_(masters), storage_(storage) {
    validate(storage_);
    for (std::size_t k = Policy::num_arrays; k < max_state_arrays; ++k)
      KOPT_THROW_IF(storage_.array_dtypes[k].has_value(),
                    label_ << ": StateStorage.array_dtypes[" << k << "] is set, but "
                           << Policy::name << " has " << Policy::num_arrays << " state arrays");
    constexpr bool takes_q8 = requires { Policy::Config::q8_square_arrays; };
    // k != num_arrays, not <: nvcc warns that k < 0 is pointless where a policy has no
    // arrays (Adafactor), and a user's -Werror would stop there.
    for (std::size_t k = 0; k != Policy::num_arrays; ++k)
      KOPT_THROW_IF(dtype(k) == DType::q8 && !takes_q8,
                    label_ << ": StateStorage stores " << Policy::name << "'s "
                           << Policy::array_names[k]
                           << " as q8, which only Adam's moments take (blockwise 8-bit)");
    KOPT_THROW_IF(storage_.arrays == DType::q8 && !takes_q8,  // also where it has no arrays
                  label_ << ": StateStorage stores " << Policy::name
                         << "'s state arrays as q8, which only Adam's moments take");
  }
  /// Refuses a param whose master this storage cannot keep, naming it: remainders and
  /// stochastic rounding are of bf16 params; an f32 param is its own master where masters
  /// are of 16-bit params, and where they are of every param (offload) its master is its
  /// fp32 host copy, so only fp32-master storage takes it.
  void check_param(const std::string& name, const Tensor& param) const {
    const bool f32 = param.dtype == DType::f32;
    const bool own_master = f32 && masters_ == Masters::of_16_bit_params;
    const auto refuse = [&](bool bad, const char* why) {
      KOPT_THROW_IF(
          bad, label_ << ": parameter '" << name << "' is " << name_of(param.dtype) << ": " << why);
    };
    refuse(f32 && !own_master && !master_copies(),
           "an offloaded f32 param's master is its fp32 host copy: give it fp32 masters "
           "(MasterStorage::f32)");
    refuse(remainders() && param.dtype != DType::bf16 && !own_master,
           "masters kept as remainders (MasterStorage::remainder) need bf16 params (or f32 "
           "ones, which are their own masters)");
    refuse(storage_.rounding == Rounding::stochastic && param.dtype != DType::bf16 && !own_master,
           "stochastic rounding (Rounding::stochastic) is of bf16 params (f32 ones are their "
           "own masters)");
  }
  /// Whether q8 array k holds its square roots.
  static bool root(std::size_t k) { return (q8_roots_of<Policy>() >> k & 1u) != 0; }
  /// Whether any array is q8: params are then laid out on whole blocks.
  bool any_q8() const {
    for (std::size_t k = 0; k != Policy::num_arrays; ++k)  // != : as above
      if (dtype(k) == DType::q8) return true;
    return false;
  }
  const StateStorage& storage() const { return storage_; }
  bool remainders() const { return storage_.master == MasterStorage::remainder; }
  /// Whether the masters are fp32 copies (MasterStorage::f32): neither remainders nor none.
  bool master_copies() const { return storage_.master == MasterStorage::f32; }
  /// The element type of array k (StateStorage::dtype_of).
  DType dtype(std::size_t k) const { return storage_.dtype_of(k); }

  /// Grows every array to the registry's layout on `exec`: each of the policy's arrays once
  /// a group uses it or the registry holds it (then kept), the masters always. New elements
  /// are zeros. Returns whether any array moved (pointers into them are stale). A failure
  /// leaves every value as it was: each array is replaced only by a complete, larger copy.
  template <class Exec>
  bool grow(const Exec& exec, ParamRegistry& registry) {
    require_kokkos(label_.c_str());
    const auto [moments, sixteen_bit] = registry.lay_out(any_q8() ? q8_block : 16);
    const std::int64_t masters = storage_.master == MasterStorage::none ? 0
                                 : masters_ == Masters::of_every_param  ? moments
                                                                        : sixteen_bit;
    const unsigned needed = arrays_needed(registry);
    const auto sized = [](const FloatView& v, std::int64_t n) {
      return static_cast<std::int64_t>(v.extent(0)) == n;
    };
    const auto wanted = [&](std::size_t k) { return (needed >> k & 1u) != 0 || held(k); };
    const auto sized_masters = [&] {
      return remainders() ? static_cast<std::int64_t>(remainder_.extent(0)) == masters
                          : sized(master_, masters);
    };
    bool ok = sized_masters();
    for (std::size_t k = 0; k < arrays_.size(); ++k)
      ok = ok && (!wanted(k) || length(k) == moments);
    if (ok) return false;
    for (std::size_t k = 0; k < arrays_.size(); ++k) {
      if (!wanted(k)) continue;
      const std::string name = label_ + "::" + Policy::array_names[k];
      const auto which = static_cast<StateArray>(k);
      if (dtype(k) == DType::bf16)
        bf16_[k] = grow_state_array(exec, bf16_[k], moments, name, which);
      else if (dtype(k) == DType::f16)
        f16_[k] = grow_state_array(exec, f16_[k], moments, name, which);
      else if (dtype(k) == DType::q8)
        q8_[k] = grow_state_array(exec, q8_[k], q8_bytes(moments), name, which);
      else
        arrays_[k] = grow_state_array(exec, arrays_[k], moments, name, which);
    }
    if (remainders())
      remainder_ = grow_state_array(exec, remainder_, masters, label_ + "::remainder", kMaster);
    else
      master_ = grow_state_array(exec, master_, masters, label_ + "::master", kMaster);
    return true;
  }

  /// Array k (Policy::array_names) of fp32 state; empty while no group uses it, and when
  /// it is stored in 16 bits (bf16_array(k), f16_array(k)).
  const FloatView& array(std::size_t k) const { return arrays_[k]; }
  /// Array k when its dtype is bf16; else empty.
  const Bf16View& bf16_array(std::size_t k) const { return bf16_[k]; }
  /// Array k when its dtype is f16; else empty.
  const F16View& f16_array(std::size_t k) const { return f16_[k]; }
  /// Array k's blocks when its dtype is q8; else empty.
  const Q8View& q8_array(std::size_t k) const { return q8_[k]; }
  /// Whether array k is allocated, in either form.
  bool held(std::size_t k) const { return length(k) > 0; }
  /// The fp32 masters (empty when they are remainders).
  const FloatView& master() const { return master_; }
  /// The masters' remainders (empty unless remainders()).
  const RemainderView& remainder() const { return remainder_; }
  /// The arrays held now (bit k: array k has been allocated).
  unsigned held() const {
    unsigned mask = 0;
    for (std::size_t k = 0; k < arrays_.size(); ++k)
      if (held(k)) mask |= 1u << k;
    return mask;
  }
  /// Where entry e's master sits in master() (or remainder()), or -1 when its state has none
  /// (f32 params, MasterStorage::none).
  std::int64_t master_at(const ParamEntry& e) const {
    if (e.param.dtype == DType::f32 || storage_.master == MasterStorage::none) return -1;
    return masters_ == Masters::of_every_param ? e.state_offset : e.master_offset;
  }
  /// Points `slot` at entry e's state from its element `begin` on (null where none).
  void point(UpdateSlot& slot, const ParamEntry& e, std::int64_t begin = 0) const {
    const std::int64_t m = master_at(e);
    slot.master = m >= 0 && !remainders() ? master_.data() + m + begin : nullptr;
    slot.remainder = m >= 0 && remainders() ? remainder_.data() + m + begin : nullptr;
    slot.rounding_stream = storage_.keyed() ? rounding_stream(storage_.seed, e.name) : 0;
    slot.first_index = e.param.global_offset + begin;
    for (std::size_t k = 0; k < arrays_.size(); ++k) {
      const std::int64_t at = e.state_offset + begin;
      // A q8 array's slot starts a block: params start on blocks, and so do the pieces the
      // offload engine cuts them into.
      assert(dtype(k) != DType::q8 || at % q8_block == 0);
      slot.state[k] = !held(k)                  ? nullptr
                      : dtype(k) == DType::bf16 ? static_cast<void*>(bf16_[k].data() + at)
                      : dtype(k) == DType::f16  ? static_cast<void*>(f16_[k].data() + at)
                      : dtype(k) == DType::q8   ? static_cast<void*>(q8_block_of(q8_[k].data(), at))
                                                : static_cast<void*>(arrays_[k].data() + at);
    }
  }

  /// The index of `name`, after checking [offset, offset + count) lies in it (`call` names
  /// the caller in the message).
  std::size_t span(const ParamRegistry& registry, const std::string& name, std::int64_t offset,
                   std::int64_t count, const char* call) const {
    const std::size_t i = registry.index_of(name);
    const std::int64_t n = registry[i].param.numel;
    KOPT_THROW_IF(offset < 0 || count < 0 || offset > n || count > n - offset,
                  label_ << "::" << call << "('" << name << "'): elements [" << offset << ", "
                         << offset << " + " << count << ") are outside its " << n);
    return i;
  }

  /// Copies elements [offset, offset + count) of entry i's state into host arrays (see
  /// FusedOptimizer::read_state). Work enqueued on `exec` is waited for first.
  template <class Exec>
  void read(const Exec& exec, const ParamRegistry& registry, std::size_t i, std::int64_t offset,
            std::int64_t count, const StateArrays<float>& out) const;
  /// Overwrites elements [offset, offset + count) of entry i's state from host arrays (null,
  /// an array no group uses, an f32 param's master, any master under MasterStorage::none,
  /// whose params are all there is: left alone). Blocks.
  template <class Exec>
  void write(const Exec& exec, const ParamRegistry& registry, std::size_t i, std::int64_t offset,
             std::int64_t count, const StateArrays<const float>& in);

  /// After write() of every span: the step count of `name` (in [0, max_step_count]), and its
  /// master flagged to be reconciled with the param at its next update.
  void commit(ParamRegistry& registry, const std::string& name, std::int64_t step) const {
    const std::size_t i = registry.index_of(name);
    KOPT_THROW_IF(step < 0 || step > max_step_count,
                  label_ << ": commit_state('" << name << "'): step count " << step
                         << " is outside [0, kopt::max_step_count]");
    registry.set_loaded(i, step);  // the weights may be loaded before or after this
  }

  /// Loaded masters whose params may come rounded to even (see write()).
  const LoadedTies& loaded_ties() const { return ties_; }
  /// Before the update of the entries with updated(i) (LoadedTies::settle).
  template <class Exec, class Updated>
  void settle_ties(const Exec& exec, const ParamRegistry& registry, Updated&& updated) {
    ties_.settle(exec, label_, registry, std::forward<Updated>(updated));
  }

  /// Bytes of the arrays and masters.
  std::size_t bytes() const {
    std::size_t floats = master_.span(), halves = remainder_.span();
    for (const FloatView& a : arrays_) floats += a.span();
    for (const Bf16View& a : bf16_) halves += a.span();
    for (const F16View& a : f16_) halves += a.span();
    std::size_t bytes = 0;
    for (const Q8View& a : q8_) bytes += a.span();
    return sizeof(float) * floats + sizeof(std::uint16_t) * halves + bytes;
  }

 private:
  using HostFloats =
      Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ConstHostFloats =
      Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostRemainders =
      Kokkos::View<std::uint16_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ConstHostRemainders = Kokkos::View<const std::uint16_t*, Kokkos::HostSpace,
                                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  template <class T>
  using HostView = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  /// Elements of array k, in its form.
  std::int64_t length(std::size_t k) const {
    if (dtype(k) == DType::q8)
      return static_cast<std::int64_t>(q8_[k].extent(0)) / q8_block_bytes * q8_block;
    return static_cast<std::int64_t>(dtype(k) == DType::bf16  ? bf16_[k].extent(0)
                                     : dtype(k) == DType::f16 ? f16_[k].extent(0)
                                                              : arrays_[k].extent(0));
  }

  std::string label_;
  Masters masters_;
  StateStorage storage_;
  /// Policy::array_names, each in the view of its dtype (the others empty).
  std::array<FloatView, Policy::num_arrays> arrays_;
  std::array<Bf16View, Policy::num_arrays> bf16_;
  std::array<F16View, Policy::num_arrays> f16_;
  std::array<Q8View, Policy::num_arrays> q8_;
  FloatView master_;         ///< MasterStorage::f32
  RemainderView remainder_;  ///< MasterStorage::remainder
  LoadedTies ties_;          ///< see write()
};

}  // namespace kopt::Impl

#include <kopt/impl/engine_state_io_def.hpp>
