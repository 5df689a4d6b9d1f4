#pragma once
/// \file
/// The checkpoint format (docs/checkpoint-format.md): a directory with one index file (all
/// metadata, one checksum over it) and one data file per rank (raw little-endian fp32
/// blocks, one checksum per block, kept in the index). Writers are atomic (temporary file,
/// fsync, rename, fsync of the directory); readers check everything and throw
/// kopt::CheckpointError naming the file and what is wrong.

#include <cstdint>
#include <kopt/adam_config.hpp>
#include <kopt/dtype.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

/// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0);

inline constexpr std::uint32_t kCheckpointVersion = 1;
inline constexpr char kIndexName[] = "index.kopt";

struct IndexParam {
  std::string name;
  std::uint32_t group = 0;
  DType dtype = DType::f32;
  std::int64_t global_numel = 0;
  std::int64_t step = 0;
  bool has_max = false;     ///< blocks hold the amsgrad max
  bool has_master = false;  ///< blocks hold an fp32 master (16-bit params)
};

/// Elements [global_offset, global_offset + length) of one param's state, in one rank's
/// data file: exp_avg, exp_avg_sq, then max and master where the param has them.
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
  std::vector<AdamConfig> groups;
  std::vector<IndexParam> params;
  std::vector<IndexBlock> blocks;
};

std::vector<unsigned char> serialize_index(const Index& index);
/// Parses and checks (magic, version, checksum, every count and range); `file` names the
/// file in errors.
Index parse_index(const std::vector<unsigned char>& bytes, const std::string& file);
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

/// Appends n floats as little-endian bytes; reads them back.
void append_floats(std::vector<unsigned char>& out, const float* values, std::size_t n);
void read_floats(const unsigned char* in, float* values, std::size_t n);

/// Writes `bytes` to `path` so that a crash at any point leaves the old file or the new
/// one: a temporary file in the same directory, fsync, rename over `path`, fsync of the
/// directory. Throws kopt::CheckpointError.
void write_file_atomically(const std::string& path, const std::vector<unsigned char>& bytes);
/// The whole file; throws kopt::CheckpointError when it cannot be read.
std::vector<unsigned char> read_file(const std::string& path);
/// Bytes [offset, offset + n) of a file.
std::vector<unsigned char> read_file_range(const std::string& path, std::uint64_t offset,
                                           std::uint64_t n);

/// Test hook: the next atomic writes fail (as a crash would: the temporary file is left
/// partly written, nothing is renamed) once this many more bytes have been written in
/// total; negative (the default) turns it off.
void set_checkpoint_write_failure_after(std::int64_t bytes);

}  // namespace kopt::Impl
