// The pieces of a pre-sharded param (Tensor::shard_of), one per rank, must hold each element of
// its tensor once: a gap is state nobody keeps (save() would write a checkpoint that load()
// refuses as incomplete), an overlap is grads counted twice in the clipping norm.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/impl/rank_agreement.hpp>
#include <kopt/impl/shard_plan.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {
namespace {

struct Piece {
  std::int64_t offset, numel;
  int rank;
};

}  // namespace

void check_piece_coverage(const std::vector<ParamGroup>& groups, Communicator* peers) {
  // This rank's pieces, in registration order (the same params on every rank, as agreed).
  std::vector<const ParamSpec*> specs;
  std::vector<std::int64_t> mine;
  for (const ParamGroup& g : groups)
    for (const ParamSpec& p : g.params())
      if (p.param.is_shard()) {
        specs.push_back(&p);
        mine.push_back(p.param.global_offset);
        mine.push_back(p.param.numel);
      }
  const int world = peers != nullptr ? peers->size() : 1;
  std::vector<std::vector<unsigned char>> all(1);
  all[0].resize(mine.size() * sizeof(std::int64_t));
  if (!mine.empty()) std::memcpy(all[0].data(), mine.data(), all[0].size());
  if (peers != nullptr) all = gather_bytes(*peers, all[0]);
  for (std::size_t j = 0; j < specs.size(); ++j) {
    std::vector<Piece> pieces;
    for (int r = 0; r < world; ++r) {
      std::int64_t at[2];
      std::memcpy(at, all[static_cast<std::size_t>(r)].data() + 2 * j * sizeof(std::int64_t),
                  sizeof at);
      if (at[1] > 0) pieces.push_back({at[0], at[1], r});
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    const std::int64_t n = specs[j]->param.global_numel;
    // The messages' parts, built only when one is thrown.
    const auto what = [&] {
      return "kopt::HybridOptimizer: parameter '" + specs[j]->name + "' (" + std::to_string(n) +
             " elements, cut by Tensor::shard_of): ";
    };
    const char* rule = "; the pieces of the ranks must hold each element of the tensor once";
    std::int64_t next = 0;  // the first element no piece holds yet
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      const Piece& p = pieces[k];
      KOPT_THROW_IF(p.offset > next, what() << "elements [" << next << ", " << p.offset
                                            << ") are held by no rank" << rule);
      KOPT_THROW_IF(p.offset < next, what() << "elements [" << p.offset << ", "
                                            << std::min(next, p.offset + p.numel)
                                            << ") are held by rank " << pieces[k - 1].rank
                                            << " and rank " << p.rank << rule);
      next = p.offset + p.numel;
    }
    KOPT_THROW_IF(next < n,
                  what() << "elements [" << next << ", " << n << ") are held by no rank" << rule);
  }
}

}  // namespace kopt::Impl
