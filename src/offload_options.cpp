#include <algorithm>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/offload_options.hpp>
#include <numeric>

namespace kopt {

void OffloadOptions::validate() const {
  if (fraction)
    KOPT_THROW_IF(!(*fraction >= 0.0 && *fraction <= 1.0),
                  "OffloadOptions.fraction = " << *fraction << " is invalid: must be in [0, 1]");
  KOPT_THROW_IF(chunk_elements < 1, "OffloadOptions.chunk_elements = "
                                        << chunk_elements << " is invalid: must be >= 1");
  KOPT_THROW_IF(chunk_elements > (std::int64_t{1} << 40),
                "OffloadOptions.chunk_elements = " << chunk_elements
                                                   << " is invalid: staging would not fit memory");
  KOPT_THROW_IF(staging_buffers < 2, "OffloadOptions.staging_buffers = "
                                         << staging_buffers << " is invalid: must be >= 2");
}

std::vector<bool> select_offloaded(const std::vector<std::size_t>& state_bytes,
                                   const OffloadOptions& options) {
  options.validate();
  std::vector<std::size_t> order(state_bytes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return state_bytes[a] > state_bytes[b]; });
  const double total = std::accumulate(state_bytes.begin(), state_bytes.end(), 0.0);
  double taken = 0.0;
  const auto done = [&] {
    const bool fraction_met = !options.fraction || taken >= *options.fraction * total;
    const bool budget_met = !options.device_state_budget ||
                            total - taken <= static_cast<double>(*options.device_state_budget);
    return fraction_met && budget_met;
  };
  std::vector<bool> offloaded(state_bytes.size(), false);
  for (const std::size_t i : order) {
    if (done()) break;
    offloaded[i] = true;
    taken += static_cast<double>(state_bytes[i]);
  }
  return offloaded;
}

}  // namespace kopt
