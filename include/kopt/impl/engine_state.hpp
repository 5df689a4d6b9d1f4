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
#include <kopt/impl/state_arrays.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <kopt/state_storage.hpp>
#include <string>
#include <variant>
#include <vector>

namespace kopt::Impl {

/// What picks a param's compiled update: its dtypes and its group's form of the update.
struct ClassKey {
  DType param, grad;
  int variant;
  bool operator==(const ClassKey&) const = default;
};

/// The kernel class of every entry this step: signature[i] is its key's index in `keys` + 1,
/// or 0 for an entry without a grad (skipped); keys in order of first appearance.
/// `on_updated(i)` is called for each entry with a grad, in the same pass (checks an engine
/// makes per updated entry cost no second pass over every entry).
template <class Policy, class OnUpdated = void (*)(std::size_t)>
void classify_entries(
    const ParamRegistry& registry, std::vector<int>& signature, std::vector<ClassKey>& keys,
    OnUpdated&& on_updated = [](std::size_t) {}) {
  signature.assign(registry.size(), 0);
  keys.clear();
  for (std::size_t i = 0; i < registry.size(); ++i) {
    const ParamEntry& e = registry[i];
    if (e.grad.data == nullptr) continue;
    on_updated(i);
    const ClassKey key{
        e.param.dtype, e.grad.dtype,
        Policy::variant(std::get<typename Policy::Config>(registry.config(e.group)))};
    const auto it = std::find(keys.begin(), keys.end(), key);
    signature[i] = static_cast<int>(it - keys.begin()) + 1;
    if (it == keys.end()) keys.push_back(key);
  }
}

/// What an engine's step plan (chunk tables, slots, classes) was built for: the registry's
/// version (bumped by every add, rebind, dtype or group change) and each group's policy
/// variant (a config change may pick another compiled update without touching the
/// registry). A plan is reused while both hold; both engines keep one.
template <class Policy>
class PlanStamp {
 public:
  bool current(const ParamRegistry& registry) const {
    if (!valid_ || version_ != registry.version() || variants_.size() != registry.num_groups())
      return false;
    for (std::size_t g = 0; g < registry.num_groups(); ++g)
      if (variant_of(registry, g) != variants_[g]) return false;
    return true;
  }
  /// Called once a plan is built for the registry as it is now.
  void take(const ParamRegistry& registry) {
    variants_.resize(registry.num_groups());
    for (std::size_t g = 0; g < registry.num_groups(); ++g) variants_[g] = variant_of(registry, g);
    version_ = registry.version();
    valid_ = true;
  }
  /// The next step plans again (arrays moved, masters to sync, a build that failed).
  void clear() { valid_ = false; }

 private:
  static int variant_of(const ParamRegistry& registry, std::size_t g) {
    return Policy::variant(std::get<typename Policy::Config>(registry.config(g)));
  }
  bool valid_ = false;
  std::uint64_t version_ = 0;
  std::vector<int> variants_;
};

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
    slot.rounding_stream =
        storage_.rounding == Rounding::stochastic ? rounding_stream(storage_.seed, e.name) : 0;
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
            std::int64_t count, const StateArrays<float>& out) const {
    fence(exec, label_ + "::read_state");  // updates enqueued before
    const ParamEntry& e = registry[i];
    const auto n = static_cast<std::size_t>(count);
    const auto get = [&](const FloatView& from, std::int64_t at, float* to) {
      if (to == nullptr || n == 0) return;
      if (from.extent(0) == 0) {  // an array no group uses yet: the zeros it starts from
        std::fill(to, to + n, 0.0f);
        return;
      }
      const auto first = static_cast<std::size_t>(at + offset);
      Kokkos::deep_copy(HostFloats(to, n), Kokkos::subview(from, std::make_pair(first, first + n)));
    };
    // A 16-bit array's elements, widened (zeros while it is not allocated).
    const auto get_narrow = [&](const auto& from, float* to) {
      using T = typename std::decay_t<decltype(from)>::non_const_value_type;
      if (to == nullptr || n == 0) return;
      std::vector<T> narrow(n);
      if (from.extent(0) > 0) {
        const auto first = static_cast<std::size_t>(e.state_offset + offset);
        Kokkos::deep_copy(HostView<T>(narrow.data(), n),
                          Kokkos::subview(from, std::make_pair(first, first + n)));
      }
      for (std::size_t j = 0; j < n; ++j) to[j] = to_float(narrow[j]);
    };
    for (std::size_t k = 0; k < arrays_.size(); ++k) {
      if (dtype(k) == DType::bf16)
        get_narrow(bf16_[k], out[k]);
      else if (dtype(k) == DType::f16)
        get_narrow(f16_[k], out[k]);
      else if (dtype(k) == DType::q8 && out[k] != nullptr && n > 0)
        Q8Span(q8_[k], e.state_offset, offset, count, root(k)).download().decode(out[k]);
      else
        get(arrays_[k], e.state_offset, out[k]);
    }
    float* const master = out[kMaster];
    if (master == nullptr || n == 0 || e.param.dtype == DType::f32) return;
    const std::int64_t m = master_at(e);
    const bool none = storage_.master == MasterStorage::none;
    if (m < 0 && !none) return;
    if (master_copies()) get(master_, m, master);
    if (!registry.sync_master(i) && master_copies()) return;
    // What the next update would start from, computed on a host copy of the param: the
    // engine's own master changes only then, so weights written after this still count.
    const std::size_t width = size_of(e.param.dtype);
    std::vector<unsigned char> param(n * width);
    copy_bytes(param.data(), MemorySpace::host,
               static_cast<const unsigned char*>(e.param.data) + offset * width, e.param.space,
               param.size());
    if (remainders()) {  // the param and its remainder, joined
      std::vector<std::uint16_t> low(n);
      const auto first = static_cast<std::size_t>(m + offset);
      Kokkos::deep_copy(HostRemainders(low.data(), n),
                        Kokkos::subview(remainder_, std::make_pair(first, first + n)));
      const auto* high = reinterpret_cast<const bfloat16*>(param.data());
      for (std::size_t k = 0; k < n; ++k) master[k] = join_master(high[k], low[k]);
      for (const LoadedTies::Tie& t : ties_.of(i))  // as settle_ties() will take them
        if (t.element >= offset && t.element - offset < count &&
            LoadedTies::takes(high[t.element - offset], t.master))
          master[t.element - offset] = t.master;
      return;
    }
    visit_update_dtype(e.param.dtype, [&](auto param_type) {
      using ParamT = decltype(param_type);
      if constexpr (!std::is_same_v<ParamT, float>) {
        const auto* p = reinterpret_cast<const ParamT*>(param.data());
        const SyncSpanFunctor<ParamT> sync{p, master, master};
        const WidenSpanFunctor<ParamT> widen{p, master};  // none: the param is the master
        for (std::size_t k = 0; k < n; ++k)
          none ? widen(static_cast<std::int64_t>(k)) : sync(static_cast<std::int64_t>(k));
      }
    });
  }

  /// Overwrites elements [offset, offset + count) of entry i's state from host arrays (null,
  /// an array no group uses, an f32 param's master, any master under MasterStorage::none,
  /// whose params are all there is: left alone). Blocks.
  template <class Exec>
  void write(const Exec& exec, const ParamRegistry& registry, std::size_t i, std::int64_t offset,
             std::int64_t count, const StateArrays<const float>& in) {
    const ParamEntry& e = registry[i];
    const auto n = static_cast<std::size_t>(count);
    const auto put = [&](const FloatView& to, std::int64_t at, const float* from) {
      if (from == nullptr || to.extent(0) == 0 || n == 0) return;
      const auto first = static_cast<std::size_t>(at + offset);
      Kokkos::deep_copy(exec, Kokkos::subview(to, std::make_pair(first, first + n)),
                        ConstHostFloats(from, n));
    };
    // A 16-bit array's elements, rounded to nearest even.
    const auto put_narrow = [&](const auto& to, const float* from) {
      using T = typename std::decay_t<decltype(to)>::non_const_value_type;
      if (from == nullptr || to.extent(0) == 0 || n == 0) return;
      std::vector<T> narrow(n);
      for (std::size_t j = 0; j < n; ++j) narrow[j] = from_float<T>(from[j]);
      const auto first = static_cast<std::size_t>(e.state_offset + offset);
      Kokkos::deep_copy(exec, Kokkos::subview(to, std::make_pair(first, first + n)),
                        HostView<const T>(narrow.data(), n));
      fence(exec, label_ + "::write_state");  // `narrow` dies here
    };
    for (std::size_t k = 0; k < arrays_.size(); ++k) {
      if (dtype(k) == DType::bf16)
        put_narrow(bf16_[k], in[k]);
      else if (dtype(k) == DType::f16)
        put_narrow(f16_[k], in[k]);
      else if (dtype(k) == DType::q8 && in[k] != nullptr && q8_[k].extent(0) > 0 && n > 0)
        Q8Span(q8_[k], e.state_offset, offset, count, root(k))
            .download()
            .encode(in[k], e.param.numel)
            .upload(exec);
      else
        put(arrays_[k], e.state_offset, in[k]);
    }
    const std::int64_t m = master_at(e);
    if (m >= 0 && !remainders()) put(master_, m, in[kMaster]);
    if (m >= 0 && remainders() && in[kMaster] != nullptr && n > 0) {
      // Only the master's remainder is kept: the param holds the rest once the weights saved
      // with it are loaded, before or after this (other weights move the master with them).
      // Weights saved beside an fp32 master round odd ties to even (loaded_ties.hpp).
      ties_.note(i, offset, count, in[kMaster]);
      std::vector<std::uint16_t> low(n);
      for (std::size_t k = 0; k < n; ++k) low[k] = split_remainder(in[kMaster][k]);
      const auto first = static_cast<std::size_t>(m + offset);
      Kokkos::deep_copy(exec, Kokkos::subview(remainder_, std::make_pair(first, first + n)),
                        ConstHostRemainders(low.data(), n));
      fence(exec, label_ + "::write_state");  // `low` dies here
    }
    fence(exec, label_ + "::write_state");  // the host arrays may die right after
  }

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

  /// The q8 blocks covering elements [offset, offset + count) of a param whose state starts
  /// at element `first` of a q8 array, copied to the host to be decoded or re-encoded.
  struct Q8Span {
    const Q8View& array;
    std::size_t begin, end;            ///< bytes of whole blocks in `array`
    std::int64_t offset, count, skip;  ///< skip: elements of the first block before offset
    bool root;
    std::vector<unsigned char> bytes;
    Q8Span(const Q8View& a, std::int64_t first, std::int64_t offset_, std::int64_t count_, bool r)
        : array(a), offset(offset_), count(count_), skip(offset_ % q8_block), root(r) {
      const std::int64_t from = (first + offset) / q8_block,
                         to = (first + offset + count + q8_block - 1) / q8_block;
      begin = static_cast<std::size_t>(from * q8_block_bytes);
      end = static_cast<std::size_t>(to * q8_block_bytes);
    }
    Q8Span& download() {
      bytes.resize(end - begin);
      if (array.extent(0) > 0)  // else the zeros an unallocated array starts from
        Kokkos::deep_copy(HostView<unsigned char>(bytes.data(), bytes.size()),
                          Kokkos::subview(array, std::make_pair(begin, end)));
      return *this;
    }
    /// out[j] = element offset + j.
    void decode(float* out) const {
      float block[q8_block];
      for (std::size_t b = 0; b * q8_block_bytes < bytes.size(); ++b) {
        q8_decode_run(root, bytes.data() + b * q8_block_bytes, block, q8_block);
        for (int j = 0; j < q8_block; ++j) {
          const std::int64_t at = static_cast<std::int64_t>(b) * q8_block + j - skip;
          if (at >= 0 && at < count) out[at] = block[j];
        }
      }
    }
    /// Elements [offset, offset + count) = in[j], each block they touch encoded again (the
    /// rest of a block as it was, decoded; nothing past the param's `numel` elements).
    Q8Span& encode(const float* in, std::int64_t numel) {
      float block[q8_block];
      for (std::size_t b = 0; b * q8_block_bytes < bytes.size(); ++b) {
        unsigned char* at_block = bytes.data() + b * q8_block_bytes;
        q8_decode_run(root, at_block, block, q8_block);
        const std::int64_t first = offset - skip + static_cast<std::int64_t>(b) * q8_block;
        for (int j = 0; j < q8_block; ++j) {
          const std::int64_t at = first + j - offset;
          if (at >= 0 && at < count) block[j] = in[at];
        }
        const std::int64_t n = numel - first < q8_block ? numel - first : q8_block;
        q8_encode_run(root, block, at_block, static_cast<int>(n));
      }
      return *this;
    }
    template <class Exec>
    void upload(const Exec& exec) {
      Kokkos::deep_copy(exec, Kokkos::subview(array, std::make_pair(begin, end)),
                        HostView<const unsigned char>(bytes.data(), bytes.size()));
      fence(exec, "kopt::EngineState::write_state");  // `bytes` dies after this
    }
  };

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
