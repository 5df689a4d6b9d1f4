#include <algorithm>
// The checkpoint format's bytes: checksums, little-endian records (files: checkpoint_files.cpp).
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/impl/q8_layout.hpp>
#include <type_traits>
#include <variant>

namespace kopt::Impl {

namespace {

constexpr std::size_t kIndexHeaderBytes = 32;

constexpr std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = crc_table();

// Little-endian records.
struct Writer {
  std::vector<unsigned char> out;
  template <class T>
  void put(T v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    for (std::size_t k = 0; k < sizeof(T); ++k)
      out.push_back(static_cast<unsigned char>(bits >> (8 * k)));
  }
  void put_string(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
};

struct Reader {
  const unsigned char* data;
  std::size_t size, at = 0;
  std::string file;
  void need(std::size_t n) const {
    KOPT_THROW_IF_AS(CheckpointError, n > size - at,
                     file << ": truncated or corrupt metadata (needs " << n << " bytes at byte "
                          << at << " of " << size << ")");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    std::uint64_t bits = 0;
    for (std::size_t k = 0; k < sizeof(T); ++k) bits |= std::uint64_t{data[at + k]} << (8 * k);
    at += sizeof(T);
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
  }
  /// `count` records of at least `bytes` bytes each (a count field that lies is named).
  void need_records(std::uint64_t count, std::size_t bytes, const char* what) const {
    KOPT_THROW_IF_AS(CheckpointError, count > (size - at) / bytes,
                     file << ": " << count << " " << what << " at byte " << at << ", " << size - at
                          << " bytes of metadata left (corrupt metadata)");
  }
  /// A bool field: 0 or 1, nothing else (a byte of 2 would otherwise load as `true`).
  bool get_bool(const std::string& what) {
    const auto v = get<std::uint8_t>();
    KOPT_THROW_IF_AS(CheckpointError, v > 1,
                     file << ": " << what << " is " << int{v} << ", not 0 or 1 (corrupt metadata)");
    return v != 0;
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    KOPT_THROW_IF_AS(CheckpointError, n > size - at,
                     file << ": a name of " << n << " bytes at byte " << at << ", " << size - at
                          << " bytes of metadata left (corrupt metadata)");
    std::string s(reinterpret_cast<const char*>(data + at), n);
    at += n;
    return s;
  }
};

/// Version 2: the algorithm's name, then its fields (AlgorithmConfig's visit_fields order):
/// doubles as f64, bools as one byte. Version 1 wrote Adam's fields alone.
void put_config(Writer& w, const AlgorithmConfig& config) {
  w.put_string(algorithm_name(config));
  std::visit(
      [&](auto c) {
        c.visit_fields([&](const char*, auto& field) {
          if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>)
            w.put(static_cast<std::uint8_t>(field));
          else
            w.put(static_cast<double>(field));
        });
      },
      config);
}

/// The bytes version 2 stores for a config of algorithm `algorithm`.
std::size_t config_bytes(std::size_t algorithm) {
  return visit_config_type(algorithm, [](auto c) {
    std::size_t bytes = 4 + std::strlen(c.name);
    c.visit_fields([&](const char*, auto& field) { bytes += sizeof(field) == 1 ? 1 : 8; });
    return bytes;
  });
}

/// The fewest bytes a group's config takes in an index of `version`.
std::size_t fewest_config_bytes(std::uint32_t version) {
  if (version == 1) return 44;  // Adam's fields
  std::size_t fewest = config_bytes(0);
  for (std::size_t a = 1; a < num_algorithms; ++a) fewest = std::min(fewest, config_bytes(a));
  return fewest;
}

AlgorithmConfig get_config(Reader& r, std::uint32_t g, std::uint32_t version) {
  const std::string group = "group " + std::to_string(g);
  std::size_t algorithm = 0;  // version 1: Adam
  if (version >= 2) {
    const std::string name = r.get_string();
    algorithm = algorithm_index(name);
    KOPT_THROW_IF_AS(
        CheckpointError, algorithm == num_algorithms,
        r.file << ": " << group << ": algorithm '" << name << "' is not one this kopt has");
  }
  AlgorithmConfig config = visit_config_type(algorithm, [&](auto c) -> AlgorithmConfig {
    c.visit_fields([&](const char* name, auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>)
        field = r.get_bool(group + " " + name);
      else
        field = r.get<double>();
    });
    return c;
  });
  try {
    kopt::validate(config);
  } catch (const Error& e) {
    KOPT_THROW_IF_AS(CheckpointError, true, r.file << ": " << group << ": " << embedded(e.what()));
  }
  return config;
}

void put_block(Writer& w, const IndexBlock& b) {
  w.put(b.param);
  w.put(b.global_offset);
  w.put(b.length);
  w.put(b.rank);
  w.put(b.file_offset);
  w.put(b.bytes);
  w.put(b.crc);
}

IndexBlock get_block(Reader& r) {
  IndexBlock b;
  b.param = r.get<std::uint32_t>();
  b.global_offset = r.get<std::int64_t>();
  b.length = r.get<std::int64_t>();
  b.rank = r.get<std::uint32_t>();
  b.file_offset = r.get<std::uint64_t>();
  b.bytes = r.get<std::uint64_t>();
  b.crc = r.get<std::uint32_t>();
  return b;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < bytes; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

std::vector<unsigned char> serialize_blocks(const std::vector<IndexBlock>& blocks) {
  Writer w;
  w.put(static_cast<std::uint64_t>(blocks.size()));
  for (const IndexBlock& b : blocks) put_block(w, b);
  return w.out;
}

std::vector<IndexBlock> parse_blocks(const unsigned char* data, std::size_t bytes) {
  Reader r{data, bytes, 0, "block list"};
  const auto count = r.get<std::uint64_t>();
  KOPT_THROW_IF_AS(CheckpointError, count > (r.size - r.at) / 44,  // 44 bytes per block
                   "block list: " << count << " blocks in " << r.size - r.at << " bytes");
  std::vector<IndexBlock> out(count);
  for (IndexBlock& b : out) b = get_block(r);
  return out;
}

std::vector<unsigned char> serialize_index(const Index& index, std::uint32_t version) {
  KOPT_THROW_IF_AS(CheckpointError, version < 2 || version > kCheckpointVersion,
                   "kopt: cannot write checkpoint format version " << version);
  Writer body;
  body.put(index.generation);
  body.put(index.world_size);
  body.put(static_cast<std::uint8_t>(index.has_scaler));
  body.put(index.scale);
  body.put(index.growth_tracker);
  body.put(static_cast<std::uint32_t>(index.groups.size()));
  for (const AlgorithmConfig& c : index.groups) put_config(body, c);
  body.put(static_cast<std::uint32_t>(index.params.size()));
  for (const IndexParam& p : index.params) {
    body.put_string(p.name);
    body.put(p.group);
    body.put(static_cast<std::uint8_t>(p.dtype));
    body.put(p.global_numel);
    body.put(p.step);
    body.put(p.arrays);
    body.put(static_cast<std::uint8_t>(p.has_master));
    for (const DType d : p.array_dtypes) {  // since 3; before, every array is f32
      KOPT_THROW_IF_AS(CheckpointError, version < 3 && d != DType::f32,
                       "kopt: format version " << version << " holds fp32 state only; param '"
                                               << p.name << "' stores an array of dtype code "
                                               << static_cast<int>(d));
      KOPT_THROW_IF_AS(CheckpointError, version < 5 && d == DType::q8,
                       "kopt: format version " << version << " holds no q8 arrays; param '"
                                               << p.name << "' stores one");
      if (version >= 3) body.put(static_cast<std::uint8_t>(d));
    }
    KOPT_THROW_IF_AS(CheckpointError, version < 4 && p.tensor_state != 0,
                     "kopt: format version " << version << " holds no per-param state; param '"
                                             << p.name << "' has " << p.tensor_state << " floats");
    if (version >= 4) body.put(p.rows), body.put(p.cols), body.put(p.tensor_state);
  }
  const std::vector<unsigned char> blocks = serialize_blocks(index.blocks);
  body.out.insert(body.out.end(), blocks.begin(), blocks.end());
  Writer head;
  for (const char c : kIndexMagic) head.put(static_cast<std::uint8_t>(c));
  head.put(version);
  head.put(std::uint32_t{0});  // flags
  head.put(static_cast<std::uint64_t>(body.out.size()));
  head.put(crc32c(body.out.data(), body.out.size()));
  head.put(crc32c(head.out.data(), head.out.size()));  // over the 28 bytes before it
  head.out.insert(head.out.end(), body.out.begin(), body.out.end());
  return head.out;
}

Index parse_index(const std::vector<unsigned char>& bytes, const std::string& file) {
  Reader h{bytes.data(), bytes.size(), 0, file};
  h.need(kIndexHeaderBytes);
  KOPT_THROW_IF_AS(CheckpointError, std::memcmp(bytes.data(), kIndexMagic, 8) != 0,
                   file << ": not a kopt checkpoint index (bad magic)");
  h.at = 8;
  const auto version = h.get<std::uint32_t>();
  const auto flags = h.get<std::uint32_t>();
  const auto body_len = h.get<std::uint64_t>();
  const auto body_crc = h.get<std::uint32_t>();
  const auto head_crc = h.get<std::uint32_t>();
  KOPT_THROW_IF_AS(CheckpointError, head_crc != crc32c(bytes.data(), 28),
                   file << ": header checksum mismatch (corrupt file)");
  KOPT_THROW_IF_AS(CheckpointError, version < 1 || version > kCheckpointVersion,
                   file << ": format version " << version << "; this kopt reads versions 1 to "
                        << kCheckpointVersion);
  KOPT_THROW_IF_AS(
      CheckpointError, flags != 0,
      file << ": header flags are " << flags << "; version " << version << " writes 0");
  KOPT_THROW_IF_AS(CheckpointError, body_len != bytes.size() - kIndexHeaderBytes,
                   file << ": " << bytes.size() - kIndexHeaderBytes << " bytes of metadata, the "
                        << "header says " << body_len << " (truncated file?)");
  KOPT_THROW_IF_AS(CheckpointError, body_crc != crc32c(bytes.data() + kIndexHeaderBytes, body_len),
                   file << ": metadata checksum mismatch (corrupt file)");
  Reader r{bytes.data() + kIndexHeaderBytes, body_len, 0, file};
  Index index;
  index.generation = r.get<std::uint64_t>();
  index.world_size = r.get<std::uint32_t>();
  index.has_scaler = r.get_bool("has loss scaler");
  index.scale = r.get<double>();
  index.growth_tracker = r.get<std::int64_t>();
  const auto groups = r.get<std::uint32_t>();
  r.need_records(groups, fewest_config_bytes(version), "groups");
  for (std::uint32_t g = 0; g < groups; ++g) index.groups.push_back(get_config(r, g, version));
  const auto params = r.get<std::uint32_t>();
  // The fewest bytes of a param (a 1-character name; 3 more for its array dtypes since 3,
  // 24 more for its shape and per-param state since 4).
  r.need_records(params, version >= 4 ? 55 : version >= 3 ? 31 : 28, "params");
  for (std::uint32_t p = 0; p < params; ++p) {
    IndexParam q;
    q.name = r.get_string();
    q.group = r.get<std::uint32_t>();
    const auto dtype = r.get<std::uint8_t>();
    q.global_numel = r.get<std::int64_t>();
    q.step = r.get<std::int64_t>();
    if (version == 1)  // has_max: Adam's moments, and the amsgrad max
      q.arrays = r.get_bool("param '" + q.name + "' has_max") ? 7 : 3;
    else
      q.arrays = r.get<std::uint8_t>();
    q.has_master = r.get_bool("param '" + q.name + "' has_master");
    KOPT_THROW_IF_AS(CheckpointError, dtype > static_cast<std::uint8_t>(DType::f16),
                     file << ": param '" << q.name << "' has dtype code " << int{dtype});
    q.dtype = static_cast<DType>(dtype);
    for (std::size_t k = 0; version >= 3 && k < q.array_dtypes.size(); ++k) {
      const auto d = r.get<std::uint8_t>();
      const bool q8 = version >= 5 && d == static_cast<std::uint8_t>(DType::q8);
      KOPT_THROW_IF_AS(CheckpointError, d > static_cast<std::uint8_t>(DType::f16) && !q8,
                       file << ": param '" << q.name << "' stores state array " << k
                            << " with dtype code " << int{d});
      q.array_dtypes[k] = static_cast<DType>(d);
    }
    if (version >= 4) {
      q.rows = r.get<std::int64_t>();
      q.cols = r.get<std::int64_t>();
      q.tensor_state = r.get<std::uint64_t>();
    }
    index.params.push_back(std::move(q));
  }
  const auto blocks = r.get<std::uint64_t>();
  r.need_records(blocks, 44, "blocks");
  for (std::uint64_t b = 0; b < blocks; ++b) index.blocks.push_back(get_block(r));
  KOPT_THROW_IF_AS(CheckpointError, r.at != r.size, file << ": trailing bytes after the metadata");
  check_index(index, file);
  return index;
}

std::string data_file_name(std::uint64_t generation, std::uint32_t rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "data-%016llx-r%u.kopt",
                static_cast<unsigned long long>(generation), rank);
  return name;
}

std::vector<unsigned char> data_file_header(std::uint64_t generation, std::uint32_t rank) {
  Writer w;
  for (const char c : kDataMagic) w.put(static_cast<std::uint8_t>(c));
  w.put(kDataFileVersion);
  w.put(rank);
  w.put(generation);
  w.put(std::uint64_t{0});
  return w.out;
}

void check_data_header(const unsigned char* data, std::size_t bytes, std::uint64_t generation,
                       std::uint32_t rank, const std::string& file) {
  const std::vector<unsigned char> expected = data_file_header(generation, rank);
  KOPT_THROW_IF_AS(
      CheckpointError,
      bytes < kDataHeaderBytes || std::memcmp(data, expected.data(), kDataHeaderBytes) != 0,
      file << ": not the data file of this checkpoint (bad header)");
}

std::uint64_t stored_bytes(DType dtype, std::int64_t n) {
  const auto count = static_cast<std::uint64_t>(n);
  return dtype == DType::q8 ? static_cast<std::uint64_t>(q8_bytes(n)) : stored_width(dtype) * count;
}

bool IndexParam::array_bytes(std::int64_t length, std::uint64_t& bytes) const {
  // Below 2^58 elements, each of at most 4 arrays and a master of at most 4 bytes (a q8
  // array: 260 per 256) sums to less than 2^63.
  if (length < 0 || length >= (std::int64_t{1} << 58)) return false;
  bytes = has_master ? stored_bytes(DType::f32, length) : 0;
  for (std::size_t k = 0; k < array_dtypes.size(); ++k)
    if ((arrays >> k & 1u) != 0) bytes += stored_bytes(array_dtypes[k], length);
  return true;
}

bool takes_q8(const AlgorithmConfig& config, std::size_t k) {
  return std::visit(
      [&](const auto& c) {
        return requires { std::decay_t<decltype(c)>::q8_square_arrays; }
        &&k < c.state_array_names.size();
      },
      config);
}

bool q8_root(const AlgorithmConfig& config, std::size_t k) {
  return std::visit(
      [&](const auto& c) {
        if constexpr (requires { std::decay_t<decltype(c)>::q8_square_arrays; })
          return (std::decay_t<decltype(c)>::q8_square_arrays >> k & 1u) != 0;
        return false;
      },
      config);
}

}  // namespace kopt::Impl
