#pragma once
/// \file
/// An engine's per-param rates for a policy with tensor sums (kopt/impl/tensor_sums.hpp):
/// the measure pass of each kernel class whose variant needs it, each param's sums joined
/// exactly on the host (its chunks are consecutive in its class's list), its rate from
/// Policy::rate, and the rates uploaded for the update kernel (FusedUpdateFunctor reads
/// rates()(slot) into its scalars). For every other policy an empty class: no cost.

#include <kopt/impl/engine_state.hpp>
#include <kopt/impl/tensor_sums.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

template <class ExecSpace, class Policy, bool = has_tensor_sums<Policy>>
class TensorRates {
 public:
  using memory_space = typename ExecSpace::memory_space;
  void plan(const ExecSpace&, const std::string&, const std::vector<std::vector<Chunk>>&,
            const std::vector<ClassKey>&, std::size_t) {}
  Kokkos::View<const float*, memory_space> rates() const { return {}; }
  std::size_t workspace_bytes() const { return 0; }
};

template <class ExecSpace, class Policy>
class TensorRates<ExecSpace, Policy, true> {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using Scalars = typename Policy::Scalars;
  static constexpr int K = Policy::tensor_sums;
  /// Each entry's K sums (by registry entry): an owner may join them with other ranks'
  /// sums of the same params before the rates (a sharded optimizer).
  using Sums = std::vector<std::array<ExactSum, K>>;

  /// The kernel classes (host chunk lists and keys, as FusedOptimizer uploads them) and
  /// the registry's size. All or nothing.
  void plan(const ExecSpace& exec, const std::string& label,
            const std::vector<std::vector<Chunk>>& lists, const std::vector<ClassKey>& keys,
            std::size_t num_slots) {
    constexpr std::int64_t bpc = chunk_size<ExecSpace> / tensor_sum_block;
    std::vector<ClassSums> classes(keys.size());
    for (std::size_t c = 0; c < keys.size(); ++c) {
      ClassSums& cs = classes[c];
      cs.key = keys[c];
      if (!Policy::measures(keys[c].variant)) continue;
      cs.chunks = lists[c];
      allocation_point();
      cs.sums = decltype(cs.sums)(label + "::tensor_sums", cs.chunks.size(), K);
      cs.sums_host = Kokkos::create_mirror_view(cs.sums);
      if (takes_device_paths<ExecSpace>()) {
        allocation_point();
        cs.block_sums =
            decltype(cs.block_sums)(label + "::tensor_block_sums", cs.chunks.size() * bpc, K);
        plan_runs_(exec, label, cs);
      }
    }
    allocation_point();
    Kokkos::View<float*, memory_space> rates(label + "::rates",
                                             std::max<std::size_t>(num_slots, 1));
    rates_host_ = Kokkos::create_mirror_view(rates);
    rates_ = rates;
    classes_.swap(classes);
    (void)exec;
  }

  /// Each entry's sums this step (entries without a measured class: zeros): the measure
  /// pass of every class whose variant needs it, over `chunks` (each class's device chunk
  /// table, as uploaded), with `slots` and this step's `scalars`. Blocks.
  Sums measure(const ExecSpace& exec, const std::string& label, const StateStorage& storage,
               const Kokkos::View<const UpdateSlot*, memory_space>& slots,
               const Kokkos::View<const Scalars*, memory_space>& scalars,
               const std::vector<Kokkos::View<Chunk*, memory_space>>& chunks, std::size_t entries) {
    Sums sums(entries);
    for (std::size_t c = 0; c < classes_.size(); ++c) {
      ClassSums& cs = classes_[c];
      if (!Policy::measures(cs.key.variant) || cs.chunks.empty()) continue;
      launch_(exec, label, storage, cs, slots, scalars, chunks[c]);
      if (cs.runs.extent(0) > 0) {  // devices: a run's chunks joined there first
        Kokkos::parallel_for(
            label + "::tensor_sums_runs",
            Kokkos::RangePolicy<ExecSpace>(exec, 0, cs.runs.extent(0) * K * JoinRuns::words),
            JoinRuns{cs.runs, cs.sums, cs.run_sums});
        Kokkos::deep_copy(exec, cs.run_sums_host, cs.run_sums);
      } else {
        Kokkos::deep_copy(exec, cs.sums_host, cs.sums);
      }
    }
    fence(exec, label + "::tensor_sums");
    for (ClassSums& cs : classes_) {
      const bool runs = cs.runs.extent(0) > 0;
      if (runs)
        for (std::size_t r = 0; r < cs.runs_host.size(); ++r)
          for (int k = 0; k < K; ++k) cs.run_sums_host(r, k).normalize();
      const std::size_t n = runs ? cs.runs_host.size() : cs.chunks.size();
      for (std::size_t c = 0; c < n; ++c) {
        const auto slot = static_cast<std::size_t>(runs ? cs.runs_host[c].slot : cs.chunks[c].slot);
        for (int k = 0; k < K; ++k)
          sums[slot][k].join(runs ? cs.run_sums_host(c, k) : cs.sums_host(c, k));
      }
    }
    return sums;
  }

  /// The rate of every `updated` entry from its (whole-param) sums: Policy::rate where its
  /// class measures, else its scalars' own rate; uploaded for the update kernel.
  void set_rates(const ExecSpace& exec, Sums& sums,
                 const typename Kokkos::View<UpdateSlot*, memory_space>::HostMirror& slots_host,
                 const typename Kokkos::View<Scalars*, memory_space>::HostMirror& scalars_host,
                 const std::vector<int>& signature, const std::vector<std::size_t>& updated) {
    for (const std::size_t i : updated) {
      const Scalars& s = scalars_host(slots_host(i).scalar_set);
      const ClassKey& key = classes_.at(static_cast<std::size_t>(signature[i] - 1)).key;
      if (!Policy::measures(key.variant)) {
        rates_host_(i) = s.rate;
        continue;
      }
      double d[K];
      for (int k = 0; k < K; ++k) {
        sums.at(i)[k].normalize();
        d[k] = sums[i][k].value();
      }
      rates_host_(i) = Policy::rate(s, d);
    }
    Kokkos::deep_copy(exec, rates_, rates_host_);
  }

  Kokkos::View<const float*, memory_space> rates() const { return rates_; }
  /// Bytes of its sums (devices: each block's, 1 byte per element for LAMB's two) and rates.
  std::size_t workspace_bytes() const {
    std::size_t bytes = view_bytes(rates_);
    for (const ClassSums& cs : classes_)
      bytes += view_bytes(cs.sums, cs.block_sums, cs.runs, cs.run_sums);
    return bytes;
  }
  /// Entry i's rate as set_rates() set it (a tensor stage's input).
  float host_rate(std::size_t i) const { return rates_host_(i); }

  // Public: nvcc's host stubs name a kernel's functor and a View's element type from outside
  // the class, and a private one does not compile with nvcc 13.
 public:
  /// Chunks [first, first + count) of a class, all of one param: joined on the device, so
  /// that a run's sums and not each chunk's come to the host (a chunk's K ExactSums are
  /// 336 bytes: 5.5 MB for 2^26 elements in chunks of 4096, each step).
  struct Run {
    std::int64_t first;
    std::int32_t count;
    std::int32_t slot;
  };
  /// A thread per (run, sum, word of an ExactSum): the word of its run's chunk sums added
  /// (ExactSum::join, a word at a time; the host normalizes each run's sum). A thread per run
  /// joining whole sums took 0.28 ms for 256 runs on an H200.
  struct JoinRuns {
    static constexpr int words = ExactSum::num_digits + 1;  // the digits, then `special`
    Kokkos::View<const Run*, memory_space> runs;
    Kokkos::View<const ExactSum**, memory_space> sums;
    Kokkos::View<ExactSum**, memory_space> run_sums;
    KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t t) const {
      const std::int64_t r = t / (K * words);
      const int k = static_cast<int>(t / words - r * K), d = static_cast<int>(t % words);
      const Run run = runs(r);
      if (d < ExactSum::num_digits) {
        std::uint64_t digit = 0;
        for (std::int32_t c = 0; c < run.count; ++c) digit += sums(run.first + c, k).digit[d];
        run_sums(r, k).digit[d] = digit;
      } else {
        std::uint32_t special = 0;
        for (std::int32_t c = 0; c < run.count; ++c) special |= sums(run.first + c, k).special;
        run_sums(r, k).special = special;
      }
    }
  };

 private:
  static constexpr std::int32_t chunks_per_run = 64;  // digits below 2^38 before normalize

  struct ClassSums {
    ClassKey key{};
    std::vector<Chunk> chunks;
    Kokkos::View<ExactSum**, memory_space> sums;
    typename Kokkos::View<ExactSum**, memory_space>::HostMirror sums_host;
    Kokkos::View<double**, memory_space> block_sums;
    std::vector<Run> runs_host;  ///< devices (and host team paths) only
    Kokkos::View<Run*, memory_space> runs;
    Kokkos::View<ExactSum**, memory_space> run_sums;
    typename Kokkos::View<ExactSum**, memory_space>::HostMirror run_sums_host;
  };

  /// A class's runs: each param's consecutive chunks, chunks_per_run at a time.
  static void plan_runs_(const ExecSpace& exec, const std::string& label, ClassSums& cs) {
    std::vector<Run> runs;
    for (std::size_t c = 0; c < cs.chunks.size(); ++c)
      if (runs.empty() || runs.back().slot != cs.chunks[c].slot ||
          runs.back().count == chunks_per_run)
        runs.push_back(Run{static_cast<std::int64_t>(c), 1, cs.chunks[c].slot});
      else
        ++runs.back().count;
    allocation_point();
    cs.runs = decltype(cs.runs)(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::tensor_sum_runs"), runs.size());
    allocation_point();
    cs.run_sums = decltype(cs.run_sums)(label + "::tensor_run_sums", runs.size(), K);
    cs.run_sums_host = Kokkos::create_mirror_view(cs.run_sums);
    const Kokkos::View<const Run*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
        runs.data(), runs.size());
    Kokkos::deep_copy(exec, cs.runs, host);
    fence(exec, "kopt::tensor_sum_runs");  // the copy has read `runs` before it moves
    cs.runs_host = std::move(runs);
  }

  void launch_(const ExecSpace& exec, const std::string& label, const StateStorage& storage,
               ClassSums& cs, const Kokkos::View<const UpdateSlot*, memory_space>& slots,
               const Kokkos::View<const Scalars*, memory_space>& scalars,
               const Kokkos::View<Chunk*, memory_space>& chunks) {
    constexpr std::int64_t bpc = chunk_size<ExecSpace> / tensor_sum_block;
    const bool teams = takes_device_paths<ExecSpace>();
    if (teams && cs.block_sums.extent(0) < cs.chunks.size() * bpc)  // team paths turned on later
      cs.block_sums =
          decltype(cs.block_sums)(label + "::tensor_block_sums", cs.chunks.size() * bpc, K);
    const auto n = static_cast<std::int64_t>(cs.chunks.size());
    visit_update_dtype(cs.key.param, [&](auto param_type) {
      visit_update_dtype(cs.key.grad, [&](auto grad_type) {
        visit_variant<Policy>(cs.key.variant, [&](auto v) {
          using P = decltype(param_type);
          visit_form<P>(storage, [&](auto form) {
            using F = TensorSumsFunctor<ExecSpace, Policy, decltype(v)::value, P,
                                        decltype(grad_type), typename decltype(form)::MasterT>;
            const F functor{slots,   scalars,       chunks, StateDTypes::from(storage),
                            cs.sums, cs.block_sums, bpc};
            launch_chunks(exec, label + "::tensor_sums", n, functor);
            if constexpr (has_device_paths<ExecSpace>)
              if (teams)
                Kokkos::parallel_for(label + "::tensor_sums_join",
                                     Kokkos::RangePolicy<ExecSpace>(exec, 0, n * K),
                                     JoinTensorBlocks<F>{functor});
          });
        });
      });
    });
  }

  std::vector<ClassSums> classes_;
  Kokkos::View<float*, memory_space> rates_;
  typename Kokkos::View<float*, memory_space>::HostMirror rates_host_;
};

}  // namespace kopt::Impl
