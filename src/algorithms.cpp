// The algorithm list's host-side functions (no Kokkos: the checkpoint parser uses them).
#include <kopt/algorithm_config.hpp>
#include <string>

namespace kopt {

const char* algorithm_name(const AlgorithmConfig& config) {
  return std::visit([](const auto& c) { return c.name; }, config);
}

void validate(const AlgorithmConfig& config) {
  std::visit([](const auto& c) { c.validate(); }, config);
}

namespace Impl {

void throw_wrong_algorithm(const AlgorithmConfig& held, const AlgorithmConfig& asked) {
  KOPT_THROW_IF(true, "the group runs '" << algorithm_name(held) << "', not '"
                                         << algorithm_name(asked) << "': ask for its config as "
                                         << algorithm_name(held) << "'s");
}

std::size_t algorithm_index(const std::string& name) {
  for (std::size_t i = 0; i < num_algorithms; ++i)
    if (name == visit_config_type(i, [](auto c) { return decltype(c)::name; })) return i;
  return num_algorithms;
}

}  // namespace Impl
}  // namespace kopt
