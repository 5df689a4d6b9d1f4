#pragma once
/// \file
/// The checkpoint format (docs/checkpoint-format.md): a directory with one index file (all
/// metadata, one checksum over it) and one data file per rank (raw little-endian fp32
/// blocks, one checksum per block, kept in the index). Writers are atomic (temporary file,
/// fsync, rename, fsync of the directory); readers check everything and throw
/// kopt::CheckpointError naming the file and what is wrong.

#include <array>
#include <cstdint>
#include <kopt/algorithm_config.hpp>
#include <kopt/dtype.hpp>
#include <kopt/state_storage.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

/// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0);

/// The version this kopt writes. Version 4 (no q8 arrays), version 3 (also no shapes, no
/// per-param state), version 2 (also every array fp32) and version 1 (also Adam only: no
/// algorithm names, has_max in place of the array mask) still load.
inline constexpr std::uint32_t kCheckpointVersion = 5;
/// The version a data file's header names: their layout has not changed since version 3
/// (what a block holds is the index's to say), so files of versions 3 to 5 share it.
inline constexpr std::uint32_t kDataFileVersion = 3;
inline constexpr char kIndexName[] = "index.kopt";
/// The first 8 bytes of an index and of a data file.
inline constexpr char kIndexMagic[8] = {'K', 'O', 'P', 'T', 'I', 'N', 'D', 'X'};
inline constexpr char kDataMagic[8] = {'K', 'O', 'P', 'T', 'D', 'A', 'T', 'A'};

struct IndexParam {
  std::string name;
  std::uint32_t group = 0;
  DType dtype = DType::f32;
  std::int64_t global_numel = 0;
  std::int64_t step = 0;
  std::uint8_t arrays = 0;  ///< bit k: blocks hold the algorithm's state array k
  bool has_master = false;  ///< blocks hold an fp32 master (16-bit params)
  /// The element type array k is stored in (f32, bf16, f16, and since version 5 q8 for an
  /// algorithm whose arrays take it; version 3: the group's StateStorage; before: f32). The
  /// master is f32.
  std::array<DType, max_state_arrays> array_dtypes{DType::f32, DType::f32, DType::f32};
  /// Version 4: the param's 2-D shape (-1, -1: none), and the fp32 floats of its per-param
  /// state (Adafactor's factored statistics; 0: none). A param with per-param state has
  /// one block, of all its elements, and the state follows its arrays there.
  std::int64_t rows = -1, cols = -1;
  std::uint64_t tensor_state = 0;
  /// Bytes of a block of `length` elements of this param, its per-param state aside: each
  /// array it holds at its dtype (q8: q8_bytes(length), whole blocks of 256 counted from the
  /// block's first element), then the master. False where that would pass 2^63.
  bool array_bytes(std::int64_t length, std::uint64_t& bytes) const;
};

/// Elements [global_offset, global_offset + length) of one param's state, in one rank's
/// data file: the algorithm's arrays the param keeps (IndexParam::arrays), then its master,
/// then its per-param state (IndexParam::tensor_state floats, f32).
struct IndexBlock {
  std::uint32_t param = 0;
  std::int64_t global_offset = 0, length = 0;
  std::uint32_t rank = 0;
  std::uint64_t file_offset = 0, bytes = 0;
  std::uint32_t crc = 0;
};

struct Index {
  std::uint64_t generation = 0;  ///< names this save's data files
  std::uint32_t world_size = 1;
  bool has_scaler = false;
  double scale = 1.0;
  std::int64_t growth_tracker = 0;
  std::vector<AlgorithmConfig> groups;
  std::vector<IndexParam> params;
  std::vector<IndexBlock> blocks;  ///< after parse_index: sorted by (param, global_offset)
  /// After parse_index: param p's blocks are blocks[first_block[p], first_block[p + 1]).
  std::vector<std::size_t> first_block;
};

/// The index in the bytes of format `version`: this kopt's, or 2 where every array is f32
/// (tests write older files with it).
std::vector<unsigned char> serialize_index(const Index& index,
                                           std::uint32_t version = kCheckpointVersion);
/// Parses and checks (magic, version, checksum, every count and range, then check_index);
/// `file` names the file in errors.
Index parse_index(const std::vector<unsigned char>& bytes, const std::string& file);
/// What the content of a well-formed index must satisfy (src/checkpoint_checks.cpp; listed in
/// docs/checkpoint-format.md): flags and step counts in range, has_master and the arrays as
/// the dtype and the group's algorithm require, blocks covering every element of every param
/// exactly once and sharing no bytes. Sorts the blocks and fills first_block. Throws
/// CheckpointError.
void check_index(Index& index, const std::string& file);
/// Block descriptors alone (what ranks send rank 0 when saving).
std::vector<unsigned char> serialize_blocks(const std::vector<IndexBlock>& blocks);
std::vector<IndexBlock> parse_blocks(const unsigned char* data, std::size_t bytes);

/// "data-<generation, 16 hex digits>-r<rank>.kopt"
std::string data_file_name(std::uint64_t generation, std::uint32_t rank);
/// The data file's fixed header; blocks start right after it.
std::vector<unsigned char> data_file_header(std::uint64_t generation, std::uint32_t rank);
inline constexpr std::size_t kDataHeaderBytes = 32;
/// Checks a data file's header against what the index says it is.
void check_data_header(const unsigned char* data, std::size_t bytes, std::uint64_t generation,
                       std::uint32_t rank, const std::string& file);

/// Bytes an element of a state array of `dtype` takes in a data file (f32 4, bf16 and f16 2;
/// q8 arrays are stored in whole blocks: IndexParam::array_bytes).
inline std::uint64_t stored_width(DType dtype) { return dtype == DType::f32 ? 4 : 2; }
/// Bytes `n` elements of an array of `dtype` take in a data file.
std::uint64_t stored_bytes(DType dtype, std::int64_t n);
/// Whether array k of `config`'s algorithm may be stored as q8 (Adam's moments), and whether
/// its q8 codes hold square roots (AdamConfig::q8_square_arrays).
bool takes_q8(const AlgorithmConfig& config, std::size_t k);
bool q8_root(const AlgorithmConfig& config, std::size_t k);

// Files (src/checkpoint_files.cpp).

/// A file written so that a crash at any point leaves the old file or the new one: the bytes
/// go (through a buffer of kCheckpointIoBytes) to a temporary file `<path>.tmp.<pid>` in the
/// same directory; commit() fsyncs it, renames it over `path` and fsyncs the directory. A
/// failure (a full disk, an I/O error) throws kopt::CheckpointError; the temporary file is
/// removed then and by the destructor of a file never committed; a crash leaves it for the
/// next save to remove.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, std::size_t n);
  std::uint64_t size() const { return size_; }  ///< bytes written so far
  void commit();

 private:
  void flush_();
  [[noreturn]] void fail_(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
  std::vector<unsigned char> buffer_;
  std::uint64_t size_ = 0;
};
/// The buffer each side of a save or load streams state through (the bound on the host
/// memory they take beyond the optimizer's own: docs/checkpoint-format.md).
inline constexpr std::size_t kCheckpointIoBytes = std::size_t{4} << 20;

/// `bytes` written as one AtomicFile.
void write_file_atomically(const std::string& path, const std::vector<unsigned char>& bytes);
/// The whole file; throws kopt::CheckpointError when it cannot be read or is not a regular
/// file (a FIFO, a device, a directory: refused before reading, never waited on).
std::vector<unsigned char> read_file(const std::string& path);
/// Bytes [offset, offset + n) of a regular file.
std::vector<unsigned char> read_file_range(const std::string& path, std::uint64_t offset,
                                           std::uint64_t n);
/// A regular file held open for reading (refused as read_file refuses): a load reads each
/// rank's data file through one of these, not one open per block.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  /// Bytes [offset, offset + n); throws CheckpointError on a short file.
  std::vector<unsigned char> read(std::uint64_t offset, std::uint64_t n) const;
  void read(std::uint64_t offset, std::uint64_t n, unsigned char* out) const;
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }  ///< when opened

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// An exclusive advisory lock (flock) on a checkpoint directory, held by one saver at a
/// time: a second saver, in this process or another, gets kopt::CheckpointError at once.
/// Released by the destructor, on every exit path (and by the kernel if the process dies).
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

/// Removes from `dir` what earlier saves of this format left and the index of generation
/// `keep` no longer names, and nothing else: data files `data-<16 hex>-r<rank>.kopt` of
/// another generation whose header says they are that generation's and rank's, and
/// temporaries `index.kopt.tmp.<pid>` / `data-...kopt.tmp.<pid>` whose first bytes are the
/// format's magic (or that are empty). A user's file never matches all of that.
void remove_stale_files(const std::string& dir, std::uint64_t keep);

/// Test hook: the next atomic writes fail with an I/O error once this many more bytes have
/// been written in total; negative (the default) turns it off.
void set_checkpoint_write_failure_after(std::int64_t bytes);
/// Test hook: the floats a save or load moves per span (default and at most
/// kCheckpointIoBytes / 4; 0 restores it), so small tests cross span boundaries.
void set_checkpoint_span_floats(std::int64_t n);

}  // namespace kopt::Impl
