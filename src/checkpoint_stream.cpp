// State between engines and data files, one span of one array at a time: the memory a save
// or load takes beyond the optimizer's own is at most three buffers of kCheckpointIoBytes
// (docs/checkpoint-format.md, "Memory"), whatever the size of the params or of the state.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <kopt/error.hpp>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/checkpoint_stream.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

namespace {
constexpr std::int64_t kFullSpan = kCheckpointIoBytes / sizeof(float);
std::atomic<std::int64_t> span_floats{kFullSpan};

/// The dtype block array a is stored in: the algorithm's arrays at their dtypes, the master
/// (a = kMaster) in f32.
DType stored_dtype(const std::array<DType, max_state_arrays>& dtypes, std::size_t a) {
  return a < dtypes.size() ? dtypes[a] : DType::f32;
}

/// The little-endian bytes of element x: a float's 32 bits, or a 16-bit dtype's (the value
/// rounded to nearest even: exact for what a 16-bit array held).
void encode(DType dtype, const float* values, std::size_t n, unsigned char* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = dtype == DType::bf16  ? bfloat16::from_float(values[i]).bits
                               : dtype == DType::f16 ? float16::from_float(values[i]).bits
                                                     : float_bits(values[i]);
    for (std::uint64_t k = 0; k < stored_width(dtype); ++k)
      out[stored_width(dtype) * i + k] = static_cast<unsigned char>(bits >> (8 * k));
  }
}

/// Elements [0, n) of a q8 array's values as whole blocks of 256 from values[0] (the last
/// one maybe partial): each block's codes, its unused codes 0, then its scale's 4 bytes,
/// little-endian. Values a q8 array held, in blocks that start where its blocks start, come
/// back from these exactly: each is a code value of its block's scale, and a block's largest
/// picks that scale or half of it, which holds every one of them too.
void encode_q8(bool root, const float* values, std::size_t n, unsigned char* out) {
  for (std::size_t b = 0; b < n; b += q8_block, out += q8_block_bytes) {
    unsigned char block[q8_block_bytes] = {};
    q8_encode_run(root, values + b, block,
                  static_cast<int>(std::min<std::size_t>(q8_block, n - b)));
    std::memcpy(out, block, q8_block);
    const std::uint32_t scale = float_bits(q8_scale_of(block));
    for (int k = 0; k < 4; ++k) out[q8_block + k] = static_cast<unsigned char>(scale >> (8 * k));
  }
}

/// Elements [first, first + n) of blocks stored by encode_q8 starting at `in` (block 0 holds
/// elements [0, 256)), widened.
void decode_q8(bool root, const unsigned char* in, std::size_t first, std::size_t n,
               float* values) {
  float block_values[q8_block];
  for (std::size_t at = first; at < first + n;) {
    const std::size_t b = at / q8_block, lo = at - b * q8_block;
    const std::size_t take = std::min<std::size_t>(q8_block - lo, first + n - at);
    const unsigned char* stored = in + (b - first / q8_block) * q8_block_bytes;
    unsigned char block[q8_block_bytes];
    std::memcpy(block, stored, q8_block);
    std::uint32_t scale = 0;
    for (int k = 0; k < 4; ++k) scale |= std::uint32_t{stored[q8_block + k]} << (8 * k);
    const float scale_value = bits_float(scale);
    std::memcpy(block + q8_block, &scale_value, sizeof scale_value);
    q8_decode_run(root, block, block_values, static_cast<int>(lo + take));
    std::copy_n(block_values + lo, take, values + (at - first));
    at += take;
  }
}

/// n stored elements widened to floats.
void decode(DType dtype, const unsigned char* in, std::size_t n, float* values) {
  const std::uint64_t width = stored_width(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    for (std::uint64_t k = 0; k < width; ++k) bits |= std::uint32_t{in[width * i + k]} << (8 * k);
    values[i] = dtype == DType::bf16  ? bfloat16{static_cast<std::uint16_t>(bits)}.to_float()
                : dtype == DType::f16 ? float16{static_cast<std::uint16_t>(bits)}.to_float()
                                      : bits_float(bits);
  }
}
}  // namespace

void set_checkpoint_span_floats(std::int64_t n) {
  span_floats = n > 0 && n < kFullSpan ? n : kFullSpan;
}

std::array<bool, 4> block_arrays(unsigned arrays, bool has_master) {
  return {(arrays & 1u) != 0, (arrays & 2u) != 0, (arrays & 4u) != 0, has_master};
}

StateWriter::StateWriter(const std::string& path, std::uint64_t generation, std::uint32_t rank)
    : file_(path) {
  const std::vector<unsigned char> header = data_file_header(generation, rank);
  file_.write(header.data(), header.size());
}

void StateWriter::append(Engine& engine, const std::string& name, std::int64_t numel,
                         const std::array<bool, 4>& arrays,
                         const std::array<DType, max_state_arrays>& dtypes, unsigned q8_roots,
                         IndexBlock& block, const std::vector<float>& tensor_state) {
  block.file_offset = file_.size();
  std::uint32_t crc = 0;
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    if (!arrays[a]) continue;
    const DType dtype = stored_dtype(dtypes, a);
    // q8 spans hold whole blocks (all but the array's last).
    const std::int64_t per_span =
        dtype == DType::q8 ? std::max<std::int64_t>(q8_block, span_floats / q8_block * q8_block)
                           : std::int64_t{span_floats};
    for (std::int64_t at = 0; at < numel; at += per_span) {
      const std::int64_t count = std::min(per_span, numel - at);
      const auto n = static_cast<std::size_t>(count);
      if (span_.size() < n) span_.resize(n);
      StateSpan<float> span{at, count, {}};
      span.arrays[a] = span_.data();
      engine.read_state(name, span);
      const auto bytes = static_cast<std::size_t>(stored_bytes(dtype, count));
      if (bytes_.size() < bytes) bytes_.resize(bytes);
      if (dtype == DType::q8)
        encode_q8((q8_roots >> a & 1u) != 0, span_.data(), n, bytes_.data());
      else
        encode(dtype, span_.data(), n, bytes_.data());
      crc = crc32c(bytes_.data(), bytes, crc);
      file_.write(bytes_.data(), bytes);
    }
  }
  if (!tensor_state.empty()) {  // small (rows + cols floats) or a vector's: one write
    const std::size_t bytes = 4 * tensor_state.size();
    if (bytes_.size() < bytes) bytes_.resize(bytes);
    encode(DType::f32, tensor_state.data(), tensor_state.size(), bytes_.data());
    crc = crc32c(bytes_.data(), bytes, crc);
    file_.write(bytes_.data(), bytes);
  }
  block.bytes = file_.size() - block.file_offset;
  block.crc = crc;
}

ReadOnlyFile& StateReader::file_(std::uint32_t rank) {
  auto& file = files_[rank];
  if (!file) {
    auto opened = std::make_unique<ReadOnlyFile>(
        (std::filesystem::path(dir_) / data_file_name(index_.generation, rank)).string());
    const auto head = opened->read(0, kDataHeaderBytes);
    check_data_header(head.data(), head.size(), index_.generation, rank, opened->path());
    file = std::move(opened);
  }
  return *file;
}

const unsigned char* StateReader::view_(std::uint32_t rank, std::uint64_t offset, std::size_t n) {
  if (!window_) window_ = std::make_unique_for_overwrite<unsigned char[]>(kCheckpointIoBytes);
  if (window_rank_ != rank || offset < window_offset_ ||
      offset + n > window_offset_ + window_bytes_) {
    ReadOnlyFile& file = file_(rank);
    // As much as fits from `offset` on (a short file throws in read()).
    const std::uint64_t left = file.size() > offset ? file.size() - offset : 0;
    const auto bytes =
        std::max<std::uint64_t>(n, std::min<std::uint64_t>(kCheckpointIoBytes, left));
    window_bytes_ = 0;  // until the read succeeds
    file.read(offset, bytes, window_.get());
    window_rank_ = rank;
    window_offset_ = offset;
    window_bytes_ = bytes;
  }
  return window_.get() + (offset - window_offset_);
}

void StateReader::check(std::uint32_t param, std::int64_t offset, std::int64_t n) {
  const IndexParam& p = index_.params[param];
  std::int64_t covered = 0;
  for (std::size_t k = index_.first_block[param]; k < index_.first_block[param + 1]; ++k) {
    const IndexBlock& b = index_.blocks[k];  // this param's, by offset
    const std::int64_t lo = std::max(offset, b.global_offset);
    const std::int64_t hi = std::min(offset + n, b.global_offset + b.length);
    if (lo >= hi) continue;
    std::uint32_t crc = 0;
    for (std::uint64_t at = 0; at < b.bytes; at += kCheckpointIoBytes) {
      const auto m =
          static_cast<std::size_t>(std::min<std::uint64_t>(kCheckpointIoBytes, b.bytes - at));
      crc = crc32c(view_(b.rank, b.file_offset + at, m), m, crc);
    }
    KOPT_THROW_IF_AS(CheckpointError, crc != b.crc,
                     file_(b.rank).path()
                         << ": checksum mismatch in the data of '" << p.name << "' (corrupt file)");
    covered += hi - lo;
  }
  KOPT_THROW_IF_AS(CheckpointError, covered != n,
                   dir_ << ": the state of '" << p.name << "' elements " << offset << " to "
                        << offset + n << " is not (exactly once) in the checkpoint");
}

void apply_fresh(Engine& engine, const std::string& name, std::int64_t n) {
  // A zero master reconciles into the param widened (synced_master keeps it only for a +0
  // param, whose widening it is), and a zero remainder joins into the same: what a new
  // param's master is. Engines without masters for this param ignore it.
  const unsigned held = engine.held_state_arrays();
  const std::int64_t per_span = span_floats;
  const std::vector<float> zeros(static_cast<std::size_t>(std::min(n, per_span)), 0.0f);
  for (std::int64_t at = 0; at < n; at += per_span) {
    StateSpan<const float> span{at, std::min(per_span, n - at), {}};
    for (std::size_t a = 0; a < kMaster; ++a)
      if ((held >> a & 1u) != 0) span.arrays[a] = zeros.data();
    span.arrays[kMaster] = zeros.data();
    engine.write_state(name, span);
  }
  const std::vector<float> tensor_state = engine.tensor_state(name);
  if (!tensor_state.empty())
    engine.set_tensor_state(name, std::vector<float>(tensor_state.size(), 0.0f));
  engine.commit_state(name, 0);
}

void StateReader::apply(std::uint32_t param, std::int64_t offset, std::int64_t n, Engine& engine,
                        const std::string& name) {
  const IndexParam& p = index_.params[param];
  const std::array<bool, 4> arrays = block_arrays(p.arrays, p.has_master);
  const std::int64_t per_span = span_floats;
  // An array the engine keeps and the file does not hold (the param was saved before its
  // group used it) is the zeros it would start from, whatever it held before the load.
  const unsigned held = engine.held_state_arrays();
  for (std::size_t a = 0; a < kMaster; ++a) {
    if (arrays[a] || (held >> a & 1u) == 0) continue;
    for (std::int64_t at = 0; at < n; at += per_span) {
      const std::int64_t count = std::min(per_span, n - at);
      if (zeros_.size() < static_cast<std::size_t>(count))
        zeros_.assign(static_cast<std::size_t>(count), 0.0f);
      StateSpan<const float> span{at, count, {}};
      span.arrays[a] = zeros_.data();
      engine.write_state(name, span);
    }
  }
  for (std::size_t k = index_.first_block[param]; k < index_.first_block[param + 1]; ++k) {
    const IndexBlock& b = index_.blocks[k];
    const std::int64_t lo = std::max(offset, b.global_offset);
    const std::int64_t hi = std::min(offset + n, b.global_offset + b.length);
    if (lo >= hi) continue;
    // Array after array within the block, each b.length elements of its dtype; ours start
    // at lo. Widened here; the engine rounds them to its own dtypes.
    std::uint64_t array_start = b.file_offset;
    for (std::size_t a = 0; a < arrays.size(); ++a) {
      if (!arrays[a]) continue;
      const DType dtype = stored_dtype(p.array_dtypes, a);
      const bool root = dtype == DType::q8 && q8_root(index_.groups[p.group], a);
      for (std::int64_t at = lo; at < hi; at += per_span) {
        const std::int64_t count = std::min(per_span, hi - at);
        const auto m = static_cast<std::size_t>(count);
        if (span_.size() < m) span_.resize(m);
        const auto first = static_cast<std::uint64_t>(at - b.global_offset);  // in the block
        if (dtype == DType::q8) {  // the whole blocks that hold [first, first + m)
          const std::uint64_t from = first / q8_block, to = (first + m + q8_block - 1) / q8_block;
          decode_q8(root,
                    view_(b.rank, array_start + from * q8_block_bytes,
                          static_cast<std::size_t>((to - from) * q8_block_bytes)),
                    static_cast<std::size_t>(first), m, span_.data());
        } else {
          const std::uint64_t width = stored_width(dtype);
          decode(dtype, view_(b.rank, array_start + width * first, width * m), m, span_.data());
        }
        StateSpan<const float> span{at - offset, count, {}};
        span.arrays[a] = span_.data();
        engine.write_state(name, span);
      }
      array_start += stored_bytes(dtype, b.length);
    }
  }
  // The per-param state, after the arrays of the param's one block (check_index).
  if (p.tensor_state != 0) {
    const IndexBlock& b = index_.blocks[index_.first_block[param]];
    const std::uint64_t at = b.file_offset + b.bytes - 4 * p.tensor_state;
    std::vector<float> values(static_cast<std::size_t>(p.tensor_state));
    for (std::size_t i = 0; i < values.size(); i += static_cast<std::size_t>(kFullSpan)) {
      const std::size_t m = std::min(values.size() - i, static_cast<std::size_t>(kFullSpan));
      decode(DType::f32, view_(b.rank, at + 4 * i, 4 * m), m, values.data() + i);
    }
    engine.set_tensor_state(name, values);
  }
  engine.commit_state(name, p.step);
}

}  // namespace kopt::Impl
