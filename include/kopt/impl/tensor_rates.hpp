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
      if (!runs_on_host<ExecSpace> || host_team_paths().load(std::memory_order_relaxed)) {
        allocation_point();
        cs.block_sums =
            decltype(cs.block_sums)(label + "::tensor_block_sums", cs.chunks.size() * bpc, K);
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
      Kokkos::deep_copy(exec, cs.sums_host, cs.sums);
    }
    fence(exec, label + "::tensor_sums");
    for (const ClassSums& cs : classes_)
      for (std::size_t c = 0; c < cs.chunks.size(); ++c)
        for (int k = 0; k < K; ++k)
          sums[static_cast<std::size_t>(cs.chunks[c].slot)][k].join(cs.sums_host(c, k));
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
  /// Entry i's rate as set_rates() set it (a tensor stage's input).
  float host_rate(std::size_t i) const { return rates_host_(i); }

 private:
  struct ClassSums {
    ClassKey key{};
    std::vector<Chunk> chunks;
    Kokkos::View<ExactSum**, memory_space> sums;
    typename Kokkos::View<ExactSum**, memory_space>::HostMirror sums_host;
    Kokkos::View<double**, memory_space> block_sums;
  };

  void launch_(const ExecSpace& exec, const std::string& label, const StateStorage& storage,
               ClassSums& cs, const Kokkos::View<const UpdateSlot*, memory_space>& slots,
               const Kokkos::View<const Scalars*, memory_space>& scalars,
               const Kokkos::View<Chunk*, memory_space>& chunks) {
    constexpr std::int64_t bpc = chunk_size<ExecSpace> / tensor_sum_block;
    const bool teams =
        !runs_on_host<ExecSpace> || host_team_paths().load(std::memory_order_relaxed);
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
            if (teams)
              Kokkos::parallel_for(label + "::tensor_sums_join",
                                   Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
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
