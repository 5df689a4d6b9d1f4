// Crafted checkpoints: well-formed files whose checksums are right and whose content lies, as
// a buggy writer, a merge of two runs' files or a hand-edited index produces them. A writer of
// our own re-serializes the index (right checksums) and appends blocks to the data file (each
// with its right checksum); every lie is refused with kopt::CheckpointError naming the field,
// and the optimizer is bitwise unchanged: it then trains exactly as a twin that never saw it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/kopt.hpp>
#include <limits>

#include "checkpoint_model.hpp"

namespace {
namespace test_checkpoint_crafted {

namespace fs = std::filesystem;
using namespace kopt_test;
using kopt::Impl::IndexBlock;
using Bytes = std::vector<unsigned char>;

// Group 1 uses amsgrad. Params (mixed_defs): p0 f32[1], p1 bf16[13], p2 f16[1000],
// p3 f32[8199], p4 f32[13], p5 bf16[1000], p6 f16[8199], p7 f32[1]; odd ones in group 1.
const std::vector<kopt::AdamConfig> kConfigs = {kopt::AdamConfig{},
                                                kopt::AdamConfig{.lr = 3e-3, .amsgrad = true}};

CheckpointModel model() {
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 4};
  return CheckpointModel(mixed_defs(2), kConfigs, {0, 1, 0, 1, 0, 1, 0, 1},
                         {0, 1, 2, 3, 4, 5, 6, 7}, o);
}

// A copy of a checkpoint directory, its index and its (one) data file, rewritten by write().
struct Crafted {
  fs::path dir, data_path;
  kopt::Impl::Index index;
  Bytes data;
  std::function<void(Bytes&)> patch;  // applied to the serialized index; checksums then fixed

  Crafted(const fs::path& from, const fs::path& to) : dir(to) {
    fs::copy(from, to);
    index = kopt::Impl::parse_index(read_all(to / "index.kopt"), "crafted");
    data_path = data_file(to);
    data = read_all(data_path);
  }
  std::uint32_t param(const std::string& name) const {
    for (std::uint32_t p = 0; p < index.params.size(); ++p)
      if (index.params[p].name == name) return p;
    throw std::logic_error("no param " + name);
  }
  IndexBlock& block(const std::string& name) {
    for (IndexBlock& b : index.blocks)
      if (b.param == param(name)) return b;
    throw std::logic_error("no block of " + name);
  }
  // Elements [lo, lo + n) of the first `arrays` arrays of `b`, in a block's layout.
  Bytes slice(const IndexBlock& b, std::int64_t lo, std::int64_t n, int arrays) const {
    Bytes out;
    for (int a = 0; a < arrays; ++a) {
      const auto at = b.file_offset + static_cast<std::uint64_t>((a * b.length + lo) * 4);
      out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(at),
                 data.begin() + static_cast<std::ptrdiff_t>(at + 4 * n));
    }
    return out;
  }
  // Replaces the blocks of `name` by none, then appends blocks one by one.
  void drop_blocks(const std::string& name) {
    const std::uint32_t p = param(name);
    std::erase_if(index.blocks, [&](const IndexBlock& b) { return b.param == p; });
  }
  void append(const std::string& name, std::int64_t offset, std::int64_t n, const Bytes& bytes) {
    index.blocks.push_back(IndexBlock{param(name), offset, n, 0, data.size(), bytes.size(),
                                      kopt::Impl::crc32c(bytes.data(), bytes.size())});
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  // A block's checksum made right for whatever bytes it now points at.
  void recrc(IndexBlock& b) { b.crc = kopt::Impl::crc32c(data.data() + b.file_offset, b.bytes); }
  void write() {
    Bytes b = kopt::Impl::serialize_index(index);
    if (patch) {
      patch(b);
      const std::uint32_t body = kopt::Impl::crc32c(b.data() + 32, b.size() - 32);
      for (int k = 0; k < 4; ++k) b[24 + k] = static_cast<unsigned char>(body >> (8 * k));
      const std::uint32_t head = kopt::Impl::crc32c(b.data(), 28);
      for (int k = 0; k < 4; ++k) b[28 + k] = static_cast<unsigned char>(head >> (8 * k));
    }
    write_all(dir / "index.kopt", b);
    write_all(data_path, data);
  }
};

// Body offsets of the serialized index (docs/checkpoint-format.md): the header is 32 bytes.
// A group is its algorithm's name (4-byte length, "adam"), then Adam's 44 bytes of fields.
constexpr std::size_t kBody = 32, kGroupCount = kBody + 29, kFirstGroup = kGroupCount + 4;
constexpr std::size_t kFirstConfig = kFirstGroup + 8, kGroupBytes = 52;
constexpr std::size_t kParamCount = kFirstGroup + 2 * kGroupBytes;

void put_u32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) b[at + k] = static_cast<unsigned char>(v >> (8 * k));
}
// Where the record of param `name` starts (its name's length) in a serialized index.
std::size_t record_of(const Bytes& b, const std::string& name) {
  Bytes key(4);
  put_u32(key, 0, static_cast<std::uint32_t>(name.size()));
  key.insert(key.end(), name.begin(), name.end());
  const auto it = std::search(b.begin() + kParamCount + 4, b.end(), key.begin(), key.end());
  if (it == b.end()) throw std::logic_error("no record of " + name);
  return static_cast<std::size_t>(it - b.begin());
}
// A patch of one byte `past` bytes after the start of the record of `name`.
std::function<void(Bytes&)> record_byte(std::string name, std::size_t past, unsigned char v) {
  return [=](Bytes& b) { b[record_of(b, name) + past] = v; };
}

struct Lie {
  std::string what;
  std::function<void(Crafted&)> craft;
  std::string needle;  // the field the message must name
};

std::vector<Lie> lies() {
  constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
  return {
      // Coverage, by ranges: the element count adds up, the elements do not.
      {"first half twice, second half never",
       [](Crafted& c) {
         const IndexBlock b = c.block("p5");  // bf16 in the amsgrad group: 4 arrays
         c.drop_blocks("p5");
         c.append("p5", 0, 500, c.slice(b, 0, 500, 4));
         c.append("p5", 0, 500, c.slice(b, 0, 500, 4));
       },
       "'p5': elements [0, 500) are in two blocks"},
      {"a hole in the middle",
       [](Crafted& c) {
         const IndexBlock b = c.block("p2");  // f16, no amsgrad: 3 arrays
         c.drop_blocks("p2");
         c.append("p2", 0, 400, c.slice(b, 0, 400, 3));
         c.append("p2", 500, 500, c.slice(b, 500, 500, 3));
       },
       "'p2': elements [400, 500) are in no block"},
      {"a param with no block", [](Crafted& c) { c.drop_blocks("p3"); },
       "'p3': elements [0, 8199) are in no block"},
      // What the dtype and the group's algorithm require.
      {"bf16 param without its master",
       [](Crafted& c) {
         const IndexBlock b = c.block("p1");
         c.index.params[c.param("p1")].has_master = false;
         c.drop_blocks("p1");
         c.append("p1", 0, 13, c.slice(b, 0, 13, 3));  // m, v, max: no master
       },
       "'p1': has_master = 0"},
      {"amsgrad param without its max",
       [](Crafted& c) {
         const IndexBlock b = c.block("p3");
         c.index.params[c.param("p3")].arrays = 3;  // Adam's moments without the max
         c.drop_blocks("p3");
         c.append("p3", 0, 8199, c.slice(b, 0, 8199, 2));
       },
       "'p3': arrays = 3 in group 1 of adam, whose config uses arrays 7 of its 7"},
      {"an array Adam does not have",
       [](Crafted& c) {
         const IndexBlock b = c.block("p4");
         c.index.params[c.param("p4")].arrays = 11;  // m, v and a fourth
         c.drop_blocks("p4");
         Bytes bytes = c.slice(b, 0, 13, 2);
         bytes.resize(bytes.size() + 13 * 4, 0);
         c.append("p4", 0, 13, bytes);
       },
       "'p4': arrays = 11 in group 0 of adam, whose config uses arrays 3 of its 7"},
      // Step counts and the loss scaler.
      {"step INT64_MAX", [](Crafted& c) { c.index.params[c.param("p0")].step = i64_max; },
       "'p0': step count"},
      {"step -1", [](Crafted& c) { c.index.params[c.param("p6")].step = -1; }, "'p6': step count"},
      {"growth tracker INT64_MAX", [](Crafted& c) { c.index.growth_tracker = i64_max; },
       "growth tracker"},
      {"growth tracker at the growth interval", [](Crafted& c) { c.index.growth_tracker = 4; },
       "growth_tracker in [0, 4)"},
      {"loss scale NaN", [](Crafted& c) { c.index.scale = std::nan(""); }, "loss scale nan"},
      {"loss scale without a scaler",
       [](Crafted& c) {
         c.index.has_scaler = false;
         c.index.scale = 1024;
       },
       "has no loss scaler"},
      {"has-scaler byte 2", [](Crafted& c) { c.patch = [](Bytes& b) { b[32 + 12] = 2; }; },
       "has loss scaler is 2"},
      // Configs, groups, dtypes.
      {"lr NaN",
       [](Crafted& c) { std::get<kopt::AdamConfig>(c.index.groups[0]).lr = std::nan(""); },
       "group 0: AdamConfig.lr = nan"},
      {"negative eps", [](Crafted& c) { std::get<kopt::AdamConfig>(c.index.groups[1]).eps = -1; },
       "group 1: AdamConfig.eps"},
      {"group out of range", [](Crafted& c) { c.index.params[c.param("p2")].group = 7; },
       "'p2': group 7"},
      {"dtype code 9", [](Crafted& c) { c.index.params[c.param("p2")].dtype = kopt::DType(9); },
       "dtype code 9"},
      {"a name twice", [](Crafted& c) { c.index.params[c.param("p7")].name = "p4"; },
       "'p4' appears twice"},
      {"header flags", [](Crafted& c) { c.patch = [](Bytes& b) { b[12] = 1; }; },
       "header flags are 1"},
      // Blocks: offsets, lengths, ranks, byte ranges; the generation and world size.
      {"world size 0", [](Crafted& c) { c.index.world_size = 0; }, "world size 0"},
      {"rank outside the world", [](Crafted& c) { c.block("p0").rank = 1; },
       "rank 1 in a world of 1"},
      {"offset past the param", [](Crafted& c) { c.block("p4").global_offset = 1; },
       "elements [1, +13) are outside"},
      {"bytes for another length", [](Crafted& c) { c.block("p4").bytes += 4; }, "bytes for 13"},
      {"a block inside the header",
       [](Crafted& c) {
         IndexBlock& b = c.block("p0");
         b.file_offset = 0;
         c.recrc(b);
       },
       "inside the data file's header"},
      {"two blocks on the same bytes",
       [](Crafted& c) {
         IndexBlock& b = c.block("p4");
         b.file_offset = c.block("p3").file_offset;  // p3's first 104 bytes, their checksum
         c.recrc(b);
       },
       "share bytes"},
      {"another generation", [](Crafted& c) { c.index.generation ^= 1; }, "cannot open"},
      // Every other field, one by one.
      {"format version 6", [](Crafted& c) { c.patch = [](Bytes& b) { b[8] = 6; }; },
       "format version 6"},
      {"a shape of another numel",
       [](Crafted& c) {
         c.index.params[c.param("p4")].rows = 3;
         c.index.params[c.param("p4")].cols = 5;
       },
       "'p4': shape 3 x 5 for 13 elements"},
      {"half a shape", [](Crafted& c) { c.index.params[c.param("p4")].rows = 13; },
       "'p4': shape 13 x -1"},
      {"per-param state of an elementwise algorithm",
       [](Crafted& c) {
         c.index.params[c.param("p4")].tensor_state = 2;
         const IndexBlock b = c.block("p4");
         c.drop_blocks("p4");
         Bytes bytes = c.slice(b, 0, 13, 2);
         bytes.resize(bytes.size() + 2 * 4, 0);
         c.append("p4", 0, 13, bytes);
       },
       "'p4': 2 floats of per-param state in group 0 of adam"},
      {"array dtype code 7",
       [](Crafted& c) { c.index.params[c.param("p3")].array_dtypes[1] = kopt::DType(7); },
       "'p3' stores state array 1 with dtype code 7"},
      {"a 16-bit array over fp32 bytes",  // the blocks still hold 4 bytes per element
       [](Crafted& c) { c.index.params[c.param("p3")].array_dtypes[0] = kopt::DType::bf16; },
       "bytes for"},
      {"a q8 array over fp32 bytes",  // 4 bytes per element, not 260 per block of 256
       [](Crafted& c) { c.index.params[c.param("p3")].array_dtypes[0] = kopt::DType::q8; },
       "bytes for"},
      {"format version 0", [](Crafted& c) { c.patch = [](Bytes& b) { b[8] = 0; }; },
       "format version 0"},
      {"loss scale 0", [](Crafted& c) { c.index.scale = 0; }, "loss scale 0"},
      {"loss scale -inf",
       [](Crafted& c) { c.index.scale = -std::numeric_limits<double>::infinity(); },
       "loss scale -inf"},
      {"growth tracker -1", [](Crafted& c) { c.index.growth_tracker = -1; }, "growth tracker -1"},
      {"group count past the file",
       [](Crafted& c) { c.patch = [](Bytes& b) { put_u32(b, kGroupCount, 1000); }; },
       "1000 groups"},
      {"beta1 1", [](Crafted& c) { std::get<kopt::AdamConfig>(c.index.groups[0]).beta1 = 1; },
       "group 0: AdamConfig.beta1"},
      {"beta2 NaN",
       [](Crafted& c) { std::get<kopt::AdamConfig>(c.index.groups[1]).beta2 = std::nan(""); },
       "group 1: AdamConfig.beta2"},
      {"weight decay -1",
       [](Crafted& c) { std::get<kopt::AdamConfig>(c.index.groups[0]).weight_decay = -1; },
       "group 0: AdamConfig.weight_decay"},
      {"decoupled byte 2", [](Crafted& c) { c.patch = [](Bytes& b) { b[kFirstConfig + 40] = 2; }; },
       "group 0 decoupled is 2"},
      {"amsgrad byte 2",
       [](Crafted& c) { c.patch = [](Bytes& b) { b[kFirstConfig + kGroupBytes + 41] = 2; }; },
       "group 1 amsgrad is 2"},
      {"bias correction byte 2",
       [](Crafted& c) { c.patch = [](Bytes& b) { b[kFirstConfig + 42] = 2; }; },
       "group 0 bias_correction is 2"},
      {"maximize byte 2", [](Crafted& c) { c.patch = [](Bytes& b) { b[kFirstConfig + 43] = 2; }; },
       "group 0 maximize is 2"},
      {"param count past the file",
       [](Crafted& c) { c.patch = [](Bytes& b) { put_u32(b, kParamCount, 1u << 30); }; },
       "1073741824 params"},
      {"name length past the file",
       [](Crafted& c) { c.patch = [](Bytes& b) { put_u32(b, record_of(b, "p3"), 1u << 30); }; },
       "a name of 1073741824 bytes"},
      {"an empty name", [](Crafted& c) { c.index.params[c.param("p7")].name = ""; },
       "a param has an empty name"},
      {"array mask 2", [](Crafted& c) { c.patch = record_byte("p1", 6 + 21, 2); },
       "param 'p1': arrays = 2"},
      {"array mask 255", [](Crafted& c) { c.patch = record_byte("p2", 6 + 21, 255); },
       "param 'p2': arrays = 255"},
      {"an algorithm kopt does not have",
       [](Crafted& c) { c.patch = [](Bytes& b) { b[kFirstGroup + 4 + 3] = 'x'; }; },
       "group 0: algorithm 'adax' is not one this kopt has"},
      {"an algorithm name past the file",
       [](Crafted& c) {
         c.patch = [](Bytes& b) { put_u32(b, kFirstGroup + kGroupBytes, 1u << 30); };
       },
       "a name of 1073741824 bytes"},
      {"has_master byte 2", [](Crafted& c) { c.patch = record_byte("p1", 6 + 22, 2); },
       "param 'p1' has_master is 2"},
      {"an f32 param with a master",
       [](Crafted& c) {
         const IndexBlock b = c.block("p4");
         c.index.params[c.param("p4")].has_master = true;
         c.drop_blocks("p4");
         Bytes bytes = c.slice(b, 0, 13, 2);
         bytes.resize(bytes.size() + 13 * 4, 0);
         c.append("p4", 0, 13, bytes);
       },
       "'p4': has_master = 1"},
      {"numel -1", [](Crafted& c) { c.index.params[c.param("p0")].global_numel = -1; },
       "'p0': global numel -1"},
      {"numel one more, a block to cover it",
       [](Crafted& c) {
         c.index.params[c.param("p4")].global_numel = 14;
         Bytes bytes(2 * 4, 0);
         c.append("p4", 13, 1, bytes);
       },
       "'p4' was saved as f32[14], it is f32[13]"},
      {"block of no param", [](Crafted& c) { c.block("p0").param = 99; }, "block 0: param 99"},
      {"block length -1", [](Crafted& c) { c.block("p4").length = -1; },
       "elements [0, +-1) are outside"},
      {"block past the end of the data file",
       [](Crafted& c) { c.block("p0").file_offset = c.data.size() + 8; }, "truncated"},
      {"block checksum off by one", [](Crafted& c) { c.block("p2").crc ^= 1; },
       "checksum mismatch in the data of 'p2'"},
      {"block count past the file",
       [](Crafted& c) {
         c.patch = [](Bytes& b) {
           const std::size_t at = b.size() - 8 * 44 - 8;  // the count before 8 blocks
           put_u32(b, at, 1000);
         };
       },
       "1000 blocks"},
      {"trailing bytes",
       [](Crafted& c) {
         c.patch = [](Bytes& b) {
           b.push_back(0);
           put_u32(b, 16, static_cast<std::uint32_t>(b.size() - kBody));  // the body's length
         };
       },
       "trailing bytes"},
      {"data file of another rank",
       [](Crafted& c) {
         const Bytes other = kopt::Impl::data_file_header(c.index.generation, 1);
         std::copy(other.begin(), other.end(), c.data.begin());
       },
       "not the data file of this checkpoint"},
  };
}

TEST(CraftedCheckpoint, EveryLieIsRefusedNamingItsFieldAndChangesNothing) {
  TempDir dir;
  CheckpointModel a = model();
  a.train(0, 2);
  a.opt->save(dir.str("good"));
  {  // the crafter's own rewrite of an honest file loads: what it changes is what fails
    Crafted honest(dir.path / "good", dir.path / "honest");
    honest.write();
    CheckpointModel b = model();
    b.copy_params_from(a);
    b.opt->load(honest.dir.string());
    a.train(2, 2);
    b.train(2, 2);
    a.expect_same(b);
  }
  CheckpointModel victim = model(), twin = model();
  victim.train(0, 1);
  twin.train(0, 1);
  const std::vector<Lie> all = lies();
  for (std::size_t k = 0; k < all.size(); ++k) {
    const Lie& lie = all[k];
    SCOPED_TRACE(lie.what);
    Crafted c(dir.path / "good", dir.path / ("lie-" + std::to_string(k)));
    lie.craft(c);
    c.write();
    try {
      victim.opt->load(c.dir.string());
      ADD_FAILURE() << "loaded";
    } catch (const kopt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(lie.needle), std::string::npos) << e.what();
    }
  }
  victim.train(1, 3);
  twin.train(1, 3);
  victim.expect_same(twin);
}

TEST(CraftedCheckpoint, TheLargestStepCountLoadsAndTheNextStepIsRefused) {
  TempDir dir;
  CheckpointModel a = model();
  a.train(0, 1);
  a.opt->save(dir.str("good"));
  Crafted c(dir.path / "good", dir.path / "max");
  c.index.params[c.param("p3")].step = kopt::max_step_count;
  c.write();
  CheckpointModel b = model(), twin = model();
  b.copy_params_from(a);
  twin.copy_params_from(a);
  b.opt->load(c.dir.string());
  twin.opt->load(dir.str("good"));
  EXPECT_EQ(b.opt->step_count("p3"), kopt::max_step_count);
  b.set_grads(1);
  try {
    b.opt->step();
    ADD_FAILURE() << "stepped past kopt::max_step_count";
  } catch (const kopt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the most kopt counts"), std::string::npos) << e.what();
  }
  // Refused before any engine updated anything: every other param is as in the twin.
  for (std::size_t j = 0; j < b.defs.size(); ++j)
    EXPECT_EQ(b.params[j].get(), twin.params[j].get()) << b.name(j);
}

}  // namespace test_checkpoint_crafted
}  // namespace
