#include <bit>
// What a reader requires of an index beyond well-formed bytes (docs/checkpoint-format.md,
// "What a reader enforces"). Checksums catch torn and flipped bytes; they cannot catch a file
// whose content lies: a buggy writer, two runs' files merged, a hand-edited index. Each check
// here names the param, group or block and the field at fault.
#include <algorithm>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <limits>
#include <numeric>
#include <string_view>
#include <unordered_set>

namespace kopt::Impl {

namespace {

void check_scaler(const Index& index, const std::string& file) {
  if (index.has_scaler) {
    KOPT_THROW_IF_AS(CheckpointError, !(std::isfinite(index.scale) && index.scale > 0),
                     file << ": loss scale " << index.scale << " is not finite and > 0");
    KOPT_THROW_IF_AS(
        CheckpointError, index.growth_tracker < 0 || index.growth_tracker > max_step_count,
        file << ": loss scaler growth tracker " << index.growth_tracker << " is outside [0, 2^53]");
  } else {
    // A writer without a scaler writes scale 1 and tracker 0: anything else is not what it
    // wrote, and would be silently dropped.
    KOPT_THROW_IF_AS(CheckpointError, index.scale != 1.0 || index.growth_tracker != 0,
                     file << ": has no loss scaler but a loss scale of " << index.scale
                          << " and growth tracker " << index.growth_tracker << " (1 and 0)");
  }
}

void check_params(const Index& index, const std::string& file) {
  std::unordered_set<std::string_view> names;
  names.reserve(index.params.size());
  for (const IndexParam& p : index.params) {
    const std::string who = file + ": param '" + p.name + "'";
    KOPT_THROW_IF_AS(CheckpointError, p.name.empty(), file << ": a param has an empty name");
    KOPT_THROW_IF_AS(CheckpointError, !names.insert(p.name).second, who << " appears twice");
    KOPT_THROW_IF_AS(CheckpointError, p.group >= index.groups.size(),
                     who << ": group " << p.group << ", but there are " << index.groups.size());
    KOPT_THROW_IF_AS(CheckpointError, p.global_numel < 0,
                     who << ": global numel " << p.global_numel << " is negative");
    KOPT_THROW_IF_AS(CheckpointError, p.step < 0 || p.step > max_step_count,
                     who << ": step count " << p.step << " is outside [0, 2^53]");
    KOPT_THROW_IF_AS(CheckpointError, p.has_master != (p.dtype != DType::f32),
                     who << ": has_master = " << p.has_master << " for "
                         << (p.dtype == DType::f32 ? "an f32 param (it has no master)"
                                                   : "a 16-bit param (it has an fp32 master)"));
    // Every array the group's config uses, and any other of its algorithm's (one the
    // config has switched off since a step used it, which keeps its values).
    const AlgorithmConfig& group = index.groups[p.group];
    const unsigned used = arrays_of(group);
    const unsigned all =
        std::visit([](const auto& c) { return (1u << c.state_array_names.size()) - 1u; }, group);
    KOPT_THROW_IF_AS(CheckpointError, (p.arrays & used) != used || (p.arrays & ~all) != 0,
                     who << ": arrays = " << int{p.arrays} << " in group " << p.group << " of "
                         << algorithm_name(group) << ", whose config uses arrays " << used
                         << " of its " << all);
    for (std::size_t k = 0; k < p.array_dtypes.size(); ++k)
      KOPT_THROW_IF_AS(
          CheckpointError,
          (p.arrays >> k & 1u) != 0 && p.array_dtypes[k] == DType::q8 && !takes_q8(group, k),
          who << ": array " << k << " is stored as q8, which " << algorithm_name(group)
              << "'s arrays are not");
    // A shape of rows x cols = global_numel (without the product: it may overflow), or none.
    const bool shaped = p.rows >= 0 && p.cols >= 0 &&
                        (p.rows == 0 || p.cols == 0
                             ? p.global_numel == 0
                             : p.global_numel % p.rows == 0 && p.global_numel / p.rows == p.cols);
    KOPT_THROW_IF_AS(
        CheckpointError, !shaped && !(p.rows == -1 && p.cols == -1),
        who << ": shape " << p.rows << " x " << p.cols << " for " << p.global_numel << " elements");
    // Per-param state: of an algorithm that keeps each param whole, at most rows + cols or
    // numel floats (Adafactor's; the engine checks the exact count before a load).
    const auto most = static_cast<std::uint64_t>(shaped ? p.rows + p.cols : p.global_numel);
    KOPT_THROW_IF_AS(CheckpointError,
                     p.tensor_state != 0 && (!needs_whole_tensors(group) || p.tensor_state > most ||
                                             p.tensor_state > (std::uint64_t{1} << 60)),
                     who << ": " << p.tensor_state << " floats of per-param state in group "
                         << p.group << " of " << algorithm_name(group) << " (at most " << most
                         << ", for an algorithm that keeps params whole)");
  }
}

void check_block_fields(const Index& index, const std::string& file) {
  KOPT_THROW_IF_AS(CheckpointError, index.world_size == 0, file << ": world size 0");
  constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < index.blocks.size(); ++i) {
    const IndexBlock& b = index.blocks[i];
    const std::string who = file + ": data block " + std::to_string(i);
    KOPT_THROW_IF_AS(CheckpointError, b.param >= index.params.size(),
                     who << ": param " << b.param << ", but there are " << index.params.size());
    const IndexParam& p = index.params[b.param];
    KOPT_THROW_IF_AS(
        CheckpointError,
        b.length < 0 || b.global_offset < 0 || b.global_offset > p.global_numel - b.length,
        who << " of '" << p.name << "': elements [" << b.global_offset << ", +" << b.length
            << ") are outside its " << p.global_numel);
    KOPT_THROW_IF_AS(
        CheckpointError, b.rank >= index.world_size,
        who << " of '" << p.name << "': rank " << b.rank << " in a world of " << index.world_size);
    // (0 bytes for a param with no state, an f32 param of SGD without momentum.)
    std::uint64_t arrays = 0;
    const std::uint64_t extra = 4 * p.tensor_state;  // at most 2^63 / 4 floats: no overflow
    KOPT_THROW_IF_AS(
        CheckpointError,
        !p.array_bytes(b.length, arrays) || arrays > u64_max - extra || b.bytes != arrays + extra,
        who << " of '" << p.name << "': " << b.bytes << " bytes for " << b.length
            << " elements of its arrays (" << arrays << " bytes)"
            << (extra ? " and its per-param state" : ""));
    KOPT_THROW_IF_AS(
        CheckpointError,
        b.bytes > 0 && (b.file_offset < kDataHeaderBytes || b.file_offset > u64_max - b.bytes),
        who << " of '" << p.name << "': byte offset " << b.file_offset
            << " is inside the data file's header or past 2^64");
  }
}

// Every element of every param in exactly one block, checked by ranges; the blocks are left
// sorted by (param, offset) with first_block marking where each param's start.
void check_coverage(Index& index, const std::string& file) {
  // Stable: re-serializing a parsed index gives the same bytes again.
  std::stable_sort(
      index.blocks.begin(), index.blocks.end(), [](const IndexBlock& a, const IndexBlock& b) {
        return a.param != b.param ? a.param < b.param : a.global_offset < b.global_offset;
      });
  index.first_block.assign(index.params.size() + 1, index.blocks.size());
  std::size_t at = 0;
  for (std::uint32_t p = 0; p < index.params.size(); ++p) {
    index.first_block[p] = at;
    std::int64_t next = 0;  // the first element not covered yet
    for (; at < index.blocks.size() && index.blocks[at].param == p; ++at) {
      const IndexBlock& b = index.blocks[at];
      if (b.length == 0) continue;
      KOPT_THROW_IF_AS(CheckpointError, b.global_offset < next,
                       file << ": param '" << index.params[p].name << "': elements ["
                            << b.global_offset << ", " << std::min(next, b.global_offset + b.length)
                            << ") are in two blocks");
      KOPT_THROW_IF_AS(CheckpointError, b.global_offset > next,
                       file << ": param '" << index.params[p].name << "': elements [" << next
                            << ", " << b.global_offset << ") are in no block");
      next += b.length;
    }
    KOPT_THROW_IF_AS(CheckpointError, next != index.params[p].global_numel,
                     file << ": param '" << index.params[p].name << "': elements [" << next << ", "
                          << index.params[p].global_numel << ") are in no block");
    KOPT_THROW_IF_AS(CheckpointError,
                     index.params[p].tensor_state != 0 && at - index.first_block[p] != 1,
                     file << ": param '" << index.params[p].name << "' has per-param state in "
                          << at - index.first_block[p] << " blocks (one, whole)");
  }
}

// No two blocks share bytes of a data file: a block pointed at another's bytes (with that
// block's checksum) would load the other's state.
void check_byte_ranges(const Index& index, const std::string& file) {
  std::vector<std::size_t> order(index.blocks.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const IndexBlock &x = index.blocks[a], &y = index.blocks[b];
    return x.rank != y.rank ? x.rank < y.rank : x.file_offset < y.file_offset;
  });
  const IndexBlock* last = nullptr;
  for (const std::size_t i : order) {
    const IndexBlock& b = index.blocks[i];
    if (b.bytes == 0) continue;
    KOPT_THROW_IF_AS(
        CheckpointError,
        last && last->rank == b.rank && b.file_offset < last->file_offset + last->bytes,
        file << ": the blocks of '" << index.params[last ? last->param : 0].name << "' and '"
             << index.params[b.param].name << "' share bytes of rank " << b.rank << "'s data file");
    last = &b;
  }
}

}  // namespace

void check_index(Index& index, const std::string& file) {
  check_scaler(index, file);
  check_params(index, file);
  check_block_fields(index, file);
  check_coverage(index, file);
  check_byte_ranges(index, file);
}

}  // namespace kopt::Impl
