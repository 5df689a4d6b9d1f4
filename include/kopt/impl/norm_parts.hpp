#pragma once
/// \file
/// What an engine's grad-norm pass hands the optimizer: the exact sum of the sums of squares
/// of every canonical block it holds whole, and the pieces ("fragments") of blocks that a
/// cut (a shard boundary, a pre-sharded param's edge) splits between ranks. The optimizer
/// joins the sums, gathers the fragments from every rank, and adds each cut block once,
/// reassembled, in the block's fixed order: the norm is then the same bits whoever held
/// which elements. Host code, compiled once (src/norm_parts.cpp).

#include <cstdint>
#include <kopt/communicator.hpp>
#include <kopt/impl/block_sum.hpp>
#include <kopt/impl/exact_sum.hpp>
#include <vector>

namespace kopt::Impl {

/// Elements [first, first + count) of block `block` (global elements block * norm_block ..)
/// of param `param`, widened to float.
struct NormFragment {
  std::uint64_t param;  ///< an engine's param index; the optimizer's registration ordinal
  std::int64_t block;
  std::int32_t first;
  std::int32_t count;
  float values[norm_block];
};

struct NormParts {
  ExactSum sum;                         ///< blocks held whole
  std::vector<NormFragment> fragments;  ///< pieces of cut blocks
};

/// Where a piece of `numel` elements at `global_offset` of a param of `global_numel`
/// elements has its whole blocks: [body_begin, body_end) in local elements. Before it a
/// head fragment, after it a tail fragment, each possibly empty. The param's last block
/// counts as whole where the piece ends the param (its missing elements are zeros).
struct PieceBlocks {
  std::int64_t body_begin, body_end;
};
PieceBlocks piece_blocks(std::int64_t numel, std::int64_t global_offset, std::int64_t global_numel);

/// Adds to parts.sum every block the fragments make up (fragments of one param and block
/// merged, missing elements zero), then clears the fragments.
void add_fragment_blocks(NormParts& parts);

/// Every rank's parts, joined on every rank: the same sum and fragments everywhere.
/// Collective. One all-gather, and a second only when some rank has fragments.
void gather_norm_parts(Communicator& comm, NormParts& parts);

}  // namespace kopt::Impl
