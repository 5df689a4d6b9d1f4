#include <algorithm>
#include <kopt/error.hpp>
#include <kopt/shard_layout.hpp>

namespace kopt {

namespace {
std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }
}  // namespace

ShardLayout::ShardLayout(const std::vector<std::int64_t>& numels, int world_size,
                         std::int64_t align)
    : world_size_(world_size), align_(align), numels_(numels) {
  KOPT_THROW_IF(world_size < 1,
                "kopt::ShardLayout: world_size = " << world_size << " must be >= 1");
  KOPT_THROW_IF(
      align < alignment || align % alignment != 0,
      "kopt::ShardLayout: align = " << align << " must be a positive multiple of " << alignment);
  std::int64_t at = 0;
  for (std::size_t p = 0; p < numels.size(); ++p) {
    KOPT_THROW_IF(numels[p] < 0,
                  "kopt::ShardLayout: param " << p << " has " << numels[p] << " elements");
    starts_.push_back(at);
    at = round_up(at + numels[p], align);
  }
  shard_size_ = round_up(at, align * world_size) / world_size;
}

ShardLayout ShardLayout::whole_params(const std::vector<std::int64_t>& numels,
                                      const std::vector<double>& costs, int world_size,
                                      std::int64_t align) {
  ShardLayout layout(numels, world_size, align);  // checks the counts, world and alignment
  KOPT_THROW_IF(costs.size() != numels.size(), "kopt::ShardLayout: " << costs.size()
                                                                     << " costs for "
                                                                     << numels.size() << " params");
  std::vector<std::size_t> order(numels.size());
  for (std::size_t p = 0; p < order.size(); ++p) {
    KOPT_THROW_IF(!(costs[p] >= 0.0), "kopt::ShardLayout: param " << p << " costs " << costs[p]);
    order[p] = p;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<std::size_t>(world_size), 0.0);
  std::vector<int> owner(numels.size(), 0);
  for (const std::size_t p : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[p] = static_cast<int>(least);
    load[static_cast<std::size_t>(least)] += costs[p];
  }
  std::vector<std::int64_t> at(static_cast<std::size_t>(world_size), 0), offset(numels.size());
  for (std::size_t p = 0; p < numels.size(); ++p) {
    std::int64_t& end = at[static_cast<std::size_t>(owner[p])];
    offset[p] = end;
    end = round_up(end + numels[p], align);
  }
  layout.shard_size_ = *std::max_element(at.begin(), at.end());
  for (std::size_t p = 0; p < numels.size(); ++p)
    layout.starts_[p] = owner[p] * layout.shard_size_ + offset[p];
  return layout;
}

int ShardLayout::owner(std::size_t p) const {
  if (numels_.at(p) == 0 || shard_size_ == 0) return -1;
  return static_cast<int>(starts_[p] / shard_size_);
}

std::vector<ShardSegment> ShardLayout::segments(int rank) const {
  KOPT_THROW_IF(rank < 0 || rank >= world_size_,
                "kopt::ShardLayout: rank " << rank << " is not in a world of " << world_size_);
  std::vector<ShardSegment> out;
  const std::int64_t lo = rank * shard_size_, hi = lo + shard_size_;
  for (std::size_t p = 0; p < starts_.size(); ++p) {
    const std::int64_t b = std::max(lo, starts_[p]), e = std::min(hi, starts_[p] + numels_[p]);
    if (b < e) out.push_back(ShardSegment{p, b - starts_[p], e - b, b - lo});
  }
  return out;
}

bool ShardLayout::find_segment(int rank, std::size_t p, ShardSegment& out) const {
  const std::int64_t lo = rank * shard_size_, hi = lo + shard_size_;
  const std::int64_t b = std::max(lo, starts_[p]), e = std::min(hi, starts_[p] + numels_[p]);
  if (b >= e) return false;
  out = ShardSegment{p, b - starts_[p], e - b, b - lo};
  return true;
}

}  // namespace kopt
