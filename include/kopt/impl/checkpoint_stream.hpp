#pragma once
/// \file
/// Optimizer state between an engine and a checkpoint's data files, a bounded span at a time
/// (kCheckpointIoBytes): neither side of a save or a load ever holds a whole param, or a
/// rank's whole state, in host memory (docs/checkpoint-format.md, "Memory").

#include <array>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/impl/engine.hpp>
#include <map>
#include <memory>

namespace kopt::Impl {

/// Which state arrays a block holds, in StateArray order: the algorithm's arrays in
/// `arrays` (bit k: array k), then the fp32 master where the param has one.
std::array<bool, 4> block_arrays(unsigned arrays, bool has_master);

/// One rank's data file being written (an AtomicFile: nothing replaces the old file until
/// commit()).
class StateWriter {
 public:
  StateWriter(const std::string& path, std::uint64_t generation, std::uint32_t rank);
  /// Appends the state of `name` (its `numel` elements in `engine`) as one block, array by
  /// array (array k in dtypes[k], the master in f32; a q8 array's codes of square roots
  /// where bit k of `q8_roots`), then `tensor_state` (its per-param state, f32), and fills
  /// `block`'s file offset, byte count and checksum.
  void append(Engine& engine, const std::string& name, std::int64_t numel,
              const std::array<bool, 4>& arrays, const std::array<DType, max_state_arrays>& dtypes,
              unsigned q8_roots, IndexBlock& block, const std::vector<float>& tensor_state = {});
  void commit() { file_.commit(); }

 private:
  AtomicFile file_;
  std::vector<float> span_;           ///< one span of one array
  std::vector<unsigned char> bytes_;  ///< and its bytes
};

/// Gives `engine`'s param `name` (its piece of `n` elements) the state a new param starts
/// from, for a partial load of a file without it: zeros in every array the engine keeps and
/// in its per-param state, step count 0, and its master taken from the param at its next
/// update (commit_state), whatever it held before.
void apply_fresh(Engine& engine, const std::string& name, std::int64_t n);

/// The data files an index names, read through one window of kCheckpointIoBytes.
class StateReader {
 public:
  StateReader(std::string dir, const Index& index) : dir_(std::move(dir)), index_(index) {}
  /// Checks, before anything changes, that elements [offset, offset + n) of file param
  /// `param` are covered exactly once by blocks whose data reads back with the checksum the
  /// index gives (each block read whole) from data files whose headers are right.
  void check(std::uint32_t param, std::int64_t offset, std::int64_t n);
  /// Writes those elements into `engine`'s param `name` (its piece: element `offset` of the
  /// file param is its element 0), every array the file holds and its per-param state,
  /// then commit_state with the file's step count; arrays of the algorithm the file does not
  /// hold for it get zeros. Only after check() of the same range.
  void apply(std::uint32_t param, std::int64_t offset, std::int64_t n, Engine& engine,
             const std::string& name);

 private:
  ReadOnlyFile& file_(std::uint32_t rank);
  /// Bytes [offset, offset + n) of rank's data file, n <= kCheckpointIoBytes.
  const unsigned char* view_(std::uint32_t rank, std::uint64_t offset, std::size_t n);
  std::string dir_;
  const Index& index_;
  std::map<std::uint32_t, std::unique_ptr<ReadOnlyFile>> files_;  ///< by rank, header checked
  std::unique_ptr<unsigned char[]> window_;  ///< bytes [window_offset_, + window_bytes_)
  std::uint32_t window_rank_ = 0;
  std::uint64_t window_offset_ = 0, window_bytes_ = 0;
  std::vector<float> span_;
  std::vector<float> zeros_;  ///< one span of zeros, for arrays the file does not hold
};

}  // namespace kopt::Impl
