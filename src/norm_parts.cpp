#include <algorithm>
#include <cmath>
#include <cstring>
#include <kopt/impl/norm_parts.hpp>
#include <tuple>

namespace kopt::Impl {

double ExactSum::value() const {
  if (special & saw_nan) return std::nan("");
  if (special & saw_inf) return HUGE_VAL;
  ExactSum n = *this;
  n.normalize();
  int top = num_digits - 1;
  while (top >= 0 && n.digit[top] == 0) --top;
  if (top < 0) return 0.0;
  // The top three digits as one integer (at least 65 bits, since the top one is not zero),
  // the rest as a sticky bit; rounded to 53 bits by hand, ties to even.
  __extension__ using u128 = unsigned __int128;
  const auto at = [&](int k) { return k >= 0 ? static_cast<u128>(n.digit[k]) : u128{0}; };
  const u128 x = at(top) << 64 | at(top - 1) << 32 | at(top - 2);
  bool sticky = false;
  for (int k = 0; k < top - 2; ++k) sticky |= n.digit[k] != 0;
  int bits = 128;
  while (!(x >> (bits - 1) & 1)) --bits;
  const int shift = bits - 53;  // >= 12
  std::uint64_t mant = static_cast<std::uint64_t>(x >> shift);
  const u128 rest = x & ((u128{1} << shift) - 1), half = u128{1} << (shift - 1);
  if (rest > half || (rest == half && (sticky || (mant & 1)))) ++mant;
  // mant may have carried to 2^53: still exact in a double.
  return std::ldexp(static_cast<double>(mant), shift + 32 * (top - 2) + lsb_exponent);
}

PieceBlocks piece_blocks(std::int64_t numel, std::int64_t global_offset,
                         std::int64_t global_numel) {
  const std::int64_t b = norm_block;
  const std::int64_t head = std::min(numel, (b - global_offset % b) % b);
  const std::int64_t end = global_offset + numel;
  const std::int64_t tail = end == global_numel ? 0 : end % b;
  return PieceBlocks{head, std::max(head, numel - tail)};
}

void add_fragment_blocks(NormParts& parts) {
  auto& f = parts.fragments;
  std::sort(f.begin(), f.end(), [](const NormFragment& a, const NormFragment& b) {
    return std::tie(a.param, a.block, a.first) < std::tie(b.param, b.block, b.first);
  });
  for (std::size_t i = 0; i < f.size();) {
    float block[norm_block] = {};
    std::size_t j = i;
    for (; j < f.size() && f[j].param == f[i].param && f[j].block == f[i].block; ++j)
      std::memcpy(block + f[j].first, f[j].values, sizeof(float) * f[j].count);
    parts.sum.add(block_sum_of_squares(block));
    i = j;
  }
  f.clear();
}

void gather_norm_parts(Communicator& comm, NormParts& parts) {
  const auto world = static_cast<std::size_t>(comm.size());
  if (world == 1) return;
  struct Header {
    ExactSum sum;
    std::uint64_t fragments;
  };
  Header mine{parts.sum, parts.fragments.size()};
  mine.sum.normalize();
  std::vector<Header> all(world);
  comm.all_gather_bytes(&mine, all.data(), std::vector<std::size_t>(world, sizeof(Header)));
  ExactSum sum;
  std::vector<std::size_t> bytes(world);
  std::size_t total = 0;
  for (std::size_t r = 0; r < world; ++r) {
    sum.join(all[r].sum);
    bytes[r] = static_cast<std::size_t>(all[r].fragments) * sizeof(NormFragment);
    total += static_cast<std::size_t>(all[r].fragments);
  }
  sum.normalize();
  parts.sum = sum;
  if (total == 0) return;
  std::vector<NormFragment> gathered(total);
  comm.all_gather_bytes(parts.fragments.data(), gathered.data(), bytes);
  parts.fragments.swap(gathered);
}

}  // namespace kopt::Impl
