#pragma once
/// \file
/// kopt::ShardLayout: how a group's params are cut into one equal shard per rank (ZeRO).
///
/// Vocabulary. The *world range* is the group's params flattened in registration order,
/// each starting on a multiple of the layout's alignment (`ShardLayout::alignment` elements,
/// or a multiple of it; the gaps are padding), and the whole padded to a multiple of
/// `world_size` times that. It is cut into `world_size` equal contiguous shards: rank r's
/// *local range* is [r * shard_size, (r + 1) * shard_size). A *param range* is an offset and
/// length within one param. A rank's shard is a list of segments, each the intersection of
/// one param with the local range. Params that straddle shard boundaries and empty shards
/// (more ranks than elements) are normal; a rank may own no segment at all.

#include <cstdint>
#include <vector>

namespace kopt {

/// One param's piece of one rank's shard.
struct ShardSegment {
  std::size_t param;          ///< index of the param in the group (registration order)
  std::int64_t param_offset;  ///< first element, within the param
  std::int64_t length;        ///< elements, > 0
  std::int64_t shard_offset;  ///< first element, within the rank's local range
};

class ShardLayout {
 public:
  /// Elements: the least alignment, and the default one. Every param starts on a multiple
  /// of the layout's alignment in the world range (16: 64 bytes of fp32 state), and
  /// shard_size is a multiple of it.
  static constexpr std::int64_t alignment = 16;

  /// `numels`: element counts of the group's params, in registration order (0 allowed).
  /// `align`: a multiple of `alignment`; a group of blockwise state (q8: 256) aligns on its
  /// blocks, so that every shard holds whole blocks of each param, the same blocks at any
  /// world size. Throws kopt::InvalidArgument for world_size < 1, a negative count or an
  /// alignment that is not a positive multiple of `alignment`.
  ShardLayout(const std::vector<std::int64_t>& numels, int world_size,
              std::int64_t align = alignment);

  /// A layout that cuts no param: each is owned whole by one rank (a matrix its engine
  /// transforms as a whole, Muon's). Params in order of decreasing `costs` (ties: the earlier
  /// param first) each go to the rank with the least cost so far (ties: the lowest rank);
  /// each rank's params sit in its local range in registration order, aligned; shard_size is
  /// the most any rank holds, rounded up to alignment (the others' ranges end in padding).
  /// Throws like the constructor, and for costs of another size or a negative cost.
  static ShardLayout whole_params(const std::vector<std::int64_t>& numels,
                                  const std::vector<double>& costs, int world_size,
                                  std::int64_t align = alignment);
  /// The rank that owns param p whole (whole_params layouts; else the rank of its first
  /// element, or -1 for an empty param).
  int owner(std::size_t p) const;

  int world_size() const { return world_size_; }
  /// This layout's alignment, in elements (`alignment` or a multiple of it).
  std::int64_t align() const { return align_; }
  std::size_t num_params() const { return starts_.size(); }
  /// Elements per shard (a multiple of align(); 0 for a group without elements).
  std::int64_t shard_size() const { return shard_size_; }
  /// world_size * shard_size.
  std::int64_t padded_size() const { return shard_size_ * world_size_; }
  /// Where param p starts in the world range.
  std::int64_t param_start(std::size_t p) const { return starts_[p]; }
  std::int64_t param_numel(std::size_t p) const { return numels_[p]; }
  /// Rank r's segments, in param order. Throws for a rank outside [0, world_size).
  std::vector<ShardSegment> segments(int rank) const;
  /// Rank r's segment of param p, if it has one.
  bool find_segment(int rank, std::size_t p, ShardSegment& out) const;

 private:
  int world_size_;
  std::int64_t align_;
  std::vector<std::int64_t> numels_, starts_;
  std::int64_t shard_size_ = 0;
};

}  // namespace kopt
