#pragma once
/// \file
/// lane_square_sum (kopt/impl/lane_sums.hpp) of many items at once, for devices: the rows
/// of a matrix or the blocks of a vector in the tensor stages (Adafactor's statistics and
/// norms, ||p||). A thread per item, summing its lanes one after the other, read its item
/// alone, 16 KiB and more from its neighbours' (uncoalesced), and too few of them for a GPU:
/// Adafactor's step ran at 0.19-0.28 of its ceiling on an H200. Here a thread per (item,
/// lane) sums its lane in the same order, so a warp reads two items' 64 contiguous bytes at
/// a time; then a thread per item adds its lanes and its tail as finish_lane_squares does.
/// The same bits as lane_square_sum, and so as the host's passes (on an H200 too:
/// TeamPaths.DeviceParamsStepBitwiseLikeHostParams), and Adafactor at 0.63-0.65 (fp32).
///
/// Items: `length(b)`, `value(b, j)` (a float; called once per element, so it may write
/// beside it) and `finish(b, s)`, s the item's sum.
///
/// Columns: column_square_sums, the host's order of a matrix's column sums
/// (kopt/impl/factored_moments.hpp: blocks of rows, four rows at a time in pairs, the blocks
/// in order), a thread per (block, column) and then a thread per column.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/lane_sums.hpp>
#include <kopt/impl/team_paths.hpp>
#include <string>

namespace kopt::Impl {

namespace detail {
/// Host spaces: a thread per item, lane_square_sum of it (its stream(b) asked for ahead,
/// where the items have one).
template <class Items>
struct WholeItems {
  Items items;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t b) const {
    const auto value = [&](std::int64_t j) { return items.value(b, j); };
    if constexpr (requires { items.stream(b); })
      items.finish(b, lane_square_sum(items.length(b), value, items.stream(b)));
    else
      items.finish(b, lane_square_sum(items.length(b), value));
  }
};

template <class Items>
struct ItemLanes {
  Items items;
  double* parts;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t t) const {
    const std::int64_t b = t / sum_lanes;
    const std::int64_t whole = items.length(b) / sum_lanes * sum_lanes;
    double s = 0.0;
    for (std::int64_t j = t - b * sum_lanes; j < whole; j += sum_lanes) {
      const double v = items.value(b, j);
      s += v * v;
    }
    parts[t] = s;
  }
};

template <class Items>
struct ItemTails {
  Items items;
  const double* parts;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t b) const {
    const std::int64_t n = items.length(b), whole = n / sum_lanes * sum_lanes;
    double lane[sum_lanes];
    for (int k = 0; k < sum_lanes; ++k) lane[k] = parts[b * sum_lanes + k];
    items.finish(b, finish_lane_squares(lane, n - whole,
                                        [&](std::int64_t j) { return items.value(b, whole + j); }));
  }
};

/// Thread (block, j): parts(block, j) = the sum of squares of column j's rows in the block,
/// four rows at a time ((0 + 1) + (2 + 3)), then one at a time.
template <class Squares>
struct ColumnBlockParts {
  Squares squares;  ///< squares(i, j): element (i, j)'s square, in double
  double* parts;
  std::int64_t rows, cols, block_rows;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t t) const {
    const std::int64_t rb = t / cols, j = t - rb * cols;
    const std::int64_t end = rows < (rb + 1) * block_rows ? rows : (rb + 1) * block_rows;
    double part = 0.0;
    std::int64_t i = rb * block_rows;
    for (; i + 4 <= end; i += 4)
      part += (squares(i, j) + squares(i + 1, j)) + (squares(i + 2, j) + squares(i + 3, j));
    for (; i < end; ++i) part += squares(i, j);
    parts[t] = part;
  }
};

/// Thread j: finish(j, the column's block parts added in block order).
template <class Finish>
struct JoinColumns {
  Finish finish;
  const double* parts;
  std::int64_t cols, blocks;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    double s = 0.0;
    for (std::int64_t rb = 0; rb < blocks; ++rb) s += parts[rb * cols + j];
    finish(j, s);
  }
};
}  // namespace detail

/// Whether a tensor stage on ExecSpace takes its device passes: on devices, and on the host
/// space that has them (has_device_paths) under ScopedTeamPaths.
template <class ExecSpace>
bool device_passes() {
  return takes_device_paths<ExecSpace>();
}

/// items.finish(b, lane_square_sum of item b) for b in [0, n), on ExecSpace's default
/// instance: a thread per item on the host, the lanes apart on devices (device_passes);
/// `parts`: n x sum_lanes doubles of scratch.
template <class ExecSpace, class Items>
void item_square_sums(const std::string& label, std::int64_t n, const Items& items, double* parts) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  if (!device_passes<ExecSpace>())
    return Kokkos::parallel_for(label, Range(0, n), detail::WholeItems<Items>{items});
  Kokkos::parallel_for(label + "_lanes", Range(0, n * sum_lanes),
                       detail::ItemLanes<Items>{items, parts});
  Kokkos::parallel_for(label, Range(0, n), detail::ItemTails<Items>{items, parts});
}

/// finish(j, s_j) for each column j of a rows x cols matrix, s_j the sum of squares(i, j)
/// over its rows in the host's order (blocks of block_rows rows); `parts`: blocks x cols
/// doubles of scratch.
template <class ExecSpace, class Squares, class Finish>
void column_square_sums(const std::string& label, std::int64_t rows, std::int64_t cols,
                        std::int64_t block_rows, const Squares& squares, const Finish& finish,
                        double* parts) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  const std::int64_t blocks = (rows + block_rows - 1) / block_rows;
  Kokkos::parallel_for(label + "_parts", Range(0, blocks * cols),
                       detail::ColumnBlockParts<Squares>{squares, parts, rows, cols, block_rows});
  Kokkos::parallel_for(label, Range(0, cols),
                       detail::JoinColumns<Finish>{finish, parts, cols, blocks});
}

}  // namespace kopt::Impl
