#pragma once
/// \file
/// The algorithms kopt runs, in one list: a group's config is any of them
/// (kopt::AlgorithmConfig), and its type is the group's algorithm. Every engine, the
/// checkpoint and the C API are generic over the list. Adding an elementwise algorithm (the
/// README, "Adding an algorithm"): its public config (kopt/<name>_config.hpp), its policy
/// (kopt/impl/policies/<name>.hpp, see kopt/impl/policy.hpp) and one entry here.

#include <bit>
#include <cstddef>
#include <kopt/adafactor_config.hpp>
#include <kopt/adagrad_config.hpp>
#include <kopt/adam_config.hpp>
#include <kopt/lamb_config.hpp>
#include <kopt/lion_config.hpp>
#include <kopt/muon_config.hpp>
#include <kopt/sgd_config.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace kopt {

/// One group's algorithm and hyperparameters: AdamConfig, SgdConfig, LionConfig,
/// AdagradConfig, LambConfig, MuonConfig or AdafactorConfig (converts implicitly from each). The
/// position is kopt's own; a checkpoint records the name.
using AlgorithmConfig = std::variant<AdamConfig, SgdConfig, LionConfig, AdagradConfig, LambConfig,
                                     MuonConfig, AdafactorConfig>;

/// The algorithm's name ("adam", "sgd", "lion", "adagrad", "lamb", "muon", "adafactor").
const char* algorithm_name(const AlgorithmConfig& config);

/// Throws kopt::InvalidArgument naming the field and its value when the config is invalid.
void validate(const AlgorithmConfig& config);

namespace Impl {

inline constexpr std::size_t num_algorithms = std::variant_size_v<AlgorithmConfig>;

/// Calls f(Config{}) with a default config of algorithm `index` (an AlgorithmConfig index;
/// the last one for an index past the list).
template <class F, std::size_t I = 0>
decltype(auto) visit_config_type(std::size_t index, F&& f) {
  using C = std::variant_alternative_t<I, AlgorithmConfig>;
  if constexpr (I + 1 == num_algorithms) {
    return f(C{});
  } else {
    if (index == I) return f(C{});
    return visit_config_type<F, I + 1>(index, std::forward<F>(f));
  }
}

[[noreturn]] void throw_wrong_algorithm(const AlgorithmConfig& held, const AlgorithmConfig& asked);

/// `config` as a C (a config type of the list); throws InvalidArgument naming both algorithms
/// when it holds another.
template <class C>
C& config_as(AlgorithmConfig& config) {
  C* c = std::get_if<C>(&config);
  if (c == nullptr) throw_wrong_algorithm(config, AlgorithmConfig(C{}));
  return *c;
}

/// The state arrays a group with `config` keeps (bit k: its algorithm's array k).
inline unsigned arrays_of(const AlgorithmConfig& config) {
  return std::visit([](const auto& c) { return c.state_arrays(); }, config);
}

/// How many state arrays a group with `config` keeps per element (masters not counted).
inline std::size_t arrays_kept(const AlgorithmConfig& config) {
  return static_cast<std::size_t>(std::popcount(arrays_of(config)));
}

/// Whether a group with `config` needs sums over each whole param before its update
/// (LAMB's trust ratio; the config says `param_sums`). Offloaded groups do not run such
/// groups yet; a sharded optimizer combines each param's sums across the ranks that hold it.
inline bool needs_param_sums(const AlgorithmConfig& config) {
  return std::visit(
      [](const auto& c) {
        return requires { std::decay_t<decltype(c)>::param_sums; };
      },
      config);
}

/// Whether a group with `config` updates each param as a whole matrix (Muon; the config
/// says `whole_matrices`): its params need a 2-D shape.
inline bool needs_whole_matrices(const AlgorithmConfig& config) {
  return std::visit(
      [](const auto& c) {
        return requires { std::decay_t<decltype(c)>::whole_matrices; };
      },
      config);
}

/// Whether a group with `config` needs each param whole on one engine (Muon; Adafactor,
/// whose config says `whole_tensors`): a sharded optimizer gives each param to one rank,
/// offloaded groups do not run it, and a param must not be a piece of a larger tensor.
inline bool needs_whole_tensors(const AlgorithmConfig& config) {
  return needs_whole_matrices(config) || std::visit(
                                             [](const auto& c) {
                                               return requires {
                                                 std::decay_t<decltype(c)>::whole_tensors;
                                               };
                                             },
                                             config);
}

/// Floats of per-param state (not per element: Adafactor's factored statistics) a param
/// of a group with `config` keeps: numel elements, rows x cols (rows < 0: no shape).
inline std::int64_t tensor_state_size(const AlgorithmConfig& config, std::int64_t rows,
                                      std::int64_t cols, std::int64_t numel) {
  return std::visit(
      [&](const auto& c) -> std::int64_t {
        if constexpr (requires { c.tensor_state_size(rows, cols, numel); })
          return c.tensor_state_size(rows, cols, numel);
        else
          return 0;
      },
      config);
}

/// The AlgorithmConfig index of `name`, or num_algorithms when no algorithm has it.
std::size_t algorithm_index(const std::string& name);

}  // namespace Impl
}  // namespace kopt
