#pragma once
// A HybridOptimizer whose groups run any algorithm (kopt::AlgorithmConfig), with grads that
// depend only on (seed, step, param) so that two worlds can be stepped on the same data,
// and the optimizer state as a checkpoint holds it, per param, for bitwise comparisons.

#include <cstring>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <map>

#include "checkpoint_model.hpp"  // TempDir
#include "hybrid_world.hpp"      // ParamDef, Buffer, mixed_defs
#include "test_support.hpp"      // bits_of

namespace kopt_test {

struct AlgorithmWorld {
  std::vector<kopt::AlgorithmConfig> configs;
  std::vector<ParamDef> defs;
  std::vector<Buffer> params, grads;
  std::vector<std::vector<double>> last_grads;  // as stored (rounded to the grad dtype)
  std::unique_ptr<kopt::HybridOptimizer> opt;
  unsigned seed;

  // Group g runs configs[g], offloaded (StatePlacement::host) where host_state[g], its
  // state stored as storage[g] (default: fp32 masters and arrays).
  AlgorithmWorld(std::vector<kopt::AlgorithmConfig> cfgs, std::vector<ParamDef> ds,
                 const kopt::HybridOptions& options = {}, unsigned s = 11,
                 const std::vector<bool>& host_state = {},
                 const std::vector<kopt::StateStorage>& storage = {})
      : configs(std::move(cfgs)), defs(std::move(ds)), seed(s) {
    std::vector<kopt::ParamGroup> groups;
    for (std::size_t g = 0; g < configs.size(); ++g) {
      groups.emplace_back(configs[g], g < host_state.size() && host_state[g]
                                          ? kopt::StatePlacement::host
                                          : kopt::StatePlacement::with_params);
      if (g < storage.size()) {
        const kopt::StateStorage& st = storage[g];
        const auto seed_if = [&](kopt::Rounding r) {
          return r == kopt::Rounding::stochastic ? st.seed : 0u;
        };
        groups.back()
            .set_master(st.master)
            .set_rounding(st.rounding, seed_if(st.rounding))
            .set_state_dtype(st.arrays);
        for (std::size_t k = 0; k < kopt::max_state_arrays; ++k)
          if (st.array_dtypes[k])  // by the algorithm's name for array k
            groups.back().set_state_dtype(
                std::visit([&](const auto& c) { return std::string(c.state_array_names.at(k)); },
                           configs[g]),
                *st.array_dtypes[k]);
        // After the dtypes, which it needs: a bf16 or f16 array to round.
        if (st.state_rounding == kopt::Rounding::stochastic)
          groups.back().set_state_rounding(st.state_rounding, st.seed);
      }
    }
    std::mt19937 rng(seed);
    for (std::size_t j = 0; j < defs.size(); ++j) {
      params.emplace_back(defs[j].param, defs[j].on_device, defs[j].n);
      grads.emplace_back(defs[j].grad, defs[j].on_device, defs[j].n);
      params[j].set(uniform(rng, defs[j].n));
      groups.at(defs[j].group).add(name(j), shaped(j, params[j].tensor()), grads[j].tensor());
    }
    last_grads.resize(defs.size());
    opt = std::make_unique<kopt::HybridOptimizer>(std::move(groups), options);
  }
  static std::string name(std::size_t j) { return "p" + std::to_string(j); }
  // Param j as a matrix where its group updates whole matrices (Muon), or keeps params
  // whole (Adafactor: but every third, a vector): its most nearly square shape, wide for
  // even j, tall for odd j.
  kopt::Tensor shaped(std::size_t j, const kopt::Tensor& t) const {
    if (!kopt::Impl::needs_whole_matrices(configs.at(defs[j].group)) &&
        !(kopt::Impl::needs_whole_tensors(configs.at(defs[j].group)) && j % 3 != 2))
      return t;
    const auto n = static_cast<std::int64_t>(defs[j].n);
    std::int64_t d = 1;
    for (std::int64_t k = 1; k * k <= n; ++k)
      if (n % k == 0) d = k;
    const std::int64_t rows = n == 0 ? 0 : (j % 2 == 0 ? d : n / d);
    return t.matrix(rows, n == 0 ? 0 : n / rows);
  }
  static std::vector<double> uniform(std::mt19937& rng, std::size_t n) {
    std::uniform_real_distribution<double> d(-1, 1);
    std::vector<double> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  // The grads of step `step`, times `scale` (a loss scale), and param j's times amp[j].
  void set_grads(int step, double scale = 1.0, const std::vector<double>& amp = {}) {
    for (std::size_t j = 0; j < defs.size(); ++j) {
      std::mt19937 rng(seed * 7919u + static_cast<unsigned>(1000 * step + j));
      std::vector<double> g = uniform(rng, defs[j].n);
      for (auto& x : g) x *= scale * (j < amp.size() ? amp[j] : 1.0);
      grads[j].set(g);
      last_grads[j] = grads[j].get();
    }
  }
  void train(int first_step, int steps) {
    for (int s = first_step; s < first_step + steps; ++s) {
      set_grads(s);
      opt->step();
    }
  }
  std::vector<std::vector<double>> all_params() {
    std::vector<std::vector<double>> v;
    for (auto& p : params) v.push_back(p.get());
    return v;
  }
  // Loads the checkpoint in `dir` and writes `weights` into the params, before load() or
  // after it (a user may do either).
  void load(const std::string& dir, const std::vector<std::vector<double>>& weights,
            bool weights_first) {
    const auto set_weights = [&] {
      for (std::size_t j = 0; j < params.size(); ++j) params[j].set(weights[j]);
    };
    if (weights_first) set_weights();
    opt->load(dir);
    if (!weights_first) set_weights();
  }
};

// One param's state as a checkpoint holds it: its step count, which arrays it keeps, and
// each array (the algorithm's, then the fp32 master) as float bits over the whole param,
// whatever blocks, ranks and order the save used; then its per-param state (Adafactor's).
struct SavedParam {
  std::int64_t step = 0;
  unsigned arrays = 0;
  bool has_master = false;
  std::vector<std::vector<std::uint32_t>> values;
  std::vector<std::uint32_t> tensor_state;
  bool operator==(const SavedParam&) const = default;
};

inline std::map<std::string, SavedParam> saved_params(const std::string& dir) {
  namespace I = kopt::Impl;
  const std::string index_file = dir + "/" + I::kIndexName;
  I::Index index = I::parse_index(I::read_file(index_file), index_file);
  std::map<std::string, SavedParam> out;
  for (std::size_t p = 0; p < index.params.size(); ++p) {
    const I::IndexParam& q = index.params[p];
    SavedParam& s = out[q.name];
    s.step = q.step;
    s.arrays = q.arrays;
    s.has_master = q.has_master;
    // The dtype of each value array the blocks hold, in order (the master's f32), and
    // whether its q8 codes hold square roots.
    std::vector<kopt::DType> dtypes;
    std::vector<bool> roots;
    for (std::size_t k = 0; k < q.array_dtypes.size(); ++k)
      if ((q.arrays >> k & 1u) != 0) {
        dtypes.push_back(q.array_dtypes[k]);
        roots.push_back(I::q8_root(index.groups[q.group], k));
      }
    if (q.has_master) dtypes.push_back(kopt::DType::f32), roots.push_back(false);
    s.values.assign(dtypes.size(),
                    std::vector<std::uint32_t>(static_cast<std::size_t>(q.global_numel)));
    for (std::size_t b = index.first_block[p]; b < index.first_block[p + 1]; ++b) {
      const I::IndexBlock& blk = index.blocks[b];
      const auto bytes = I::read_file_range(
          dir + "/" + I::data_file_name(index.generation, blk.rank), blk.file_offset, blk.bytes);
      const auto len = static_cast<std::size_t>(blk.length);
      std::uint64_t elementwise = 0;
      EXPECT_TRUE(q.array_bytes(blk.length, elementwise)) << q.name;
      EXPECT_EQ(bytes.size(), elementwise + 4 * q.tensor_state) << q.name;
      if (bytes.size() != elementwise + 4 * q.tensor_state) continue;
      for (std::size_t at = elementwise; at < bytes.size(); at += 4)
        s.tensor_state.push_back(std::uint32_t{bytes[at]} | std::uint32_t{bytes[at + 1]} << 8 |
                                 std::uint32_t{bytes[at + 2]} << 16 |
                                 std::uint32_t{bytes[at + 3]} << 24);
      std::size_t at = 0;  // each value as the bits of the float it widens to
      for (std::size_t k = 0; k < dtypes.size(); ++k) {
        if (dtypes[k] == kopt::DType::q8) {  // blocks of 256 codes and a little-endian scale
          for (std::size_t b = 0; b < len; b += 256, at += I::q8_block_bytes) {
            unsigned char block[I::q8_block_bytes];
            std::memcpy(block, bytes.data() + at, I::q8_block);
            const float scale = float_of(
                std::uint32_t{bytes[at + 256]} | std::uint32_t{bytes[at + 257]} << 8 |
                std::uint32_t{bytes[at + 258]} << 16 | std::uint32_t{bytes[at + 259]} << 24);
            std::memcpy(block + I::q8_block, &scale, sizeof scale);
            float values[I::q8_block];
            const auto n = static_cast<int>(std::min<std::size_t>(256, len - b));
            I::q8_decode_run(roots[k], block, values, n);
            for (int i = 0; i < n; ++i)
              s.values[k][static_cast<std::size_t>(blk.global_offset) + b +
                          static_cast<std::size_t>(i)] = bits_of(values[i]);
          }
          continue;
        }
        const std::size_t width = I::stored_width(dtypes[k]);
        for (std::size_t i = 0; i < len; ++i, at += width) {
          std::uint32_t raw = 0;
          for (std::size_t byte = 0; byte < width; ++byte)
            raw |= std::uint32_t{bytes[at + byte]} << (8 * byte);
          const std::uint16_t half = static_cast<std::uint16_t>(raw);
          s.values[k][static_cast<std::size_t>(blk.global_offset) + i] =
              dtypes[k] == kopt::DType::bf16  ? bits_of(kopt::bfloat16{half}.to_float())
              : dtypes[k] == kopt::DType::f16 ? bits_of(kopt::float16{half}.to_float())
                                              : raw;
        }
      }
    }
  }
  return out;
}

// Bytes of optimizer state in every memory space (HybridOptimizer::state_bytes, summed).
inline std::size_t total_state_bytes(kopt::HybridOptimizer& opt) {
  std::size_t bytes = 0;
  for (const auto& [space, n] : opt.state_bytes()) bytes += n;
  return bytes;
}

// Saves `opt` into a fresh directory and reads its state back.
inline std::map<std::string, SavedParam> saved_params(kopt::HybridOptimizer& opt) {
  TempDir dir;
  opt.save(dir.str("ckpt"));
  return saved_params(dir.str("ckpt"));
}

// A save resumes bitwise: world `make()` trains 10 steps, saves and trains 10 more; another
// (first trained `own_steps` on its own, state the load must replace) loads the file, with
// the weights written before or after load(), and trains the same 10: the same params and
// saved state, bit for bit.
template <class Make>
void expect_resumes_bitwise(const Make& make, int own_steps = 0) {
  TempDir dir;
  AlgorithmWorld a = make();
  a.train(0, 10);
  a.opt->save(dir.str("ckpt"));
  const auto weights = a.all_params();
  a.train(10, 10);
  const auto end = saved_params(*a.opt);
  for (const bool weights_first : {true, false}) {
    SCOPED_TRACE(weights_first ? "weights first" : "weights after");
    AlgorithmWorld b = make();
    if (own_steps > 0) b.train(0, own_steps);
    b.load(dir.str("ckpt"), weights, weights_first);
    b.train(10, 10);
    EXPECT_EQ(b.all_params(), a.all_params());
    EXPECT_TRUE(saved_params(*b.opt) == end) << "state differs";
  }
}

}  // namespace kopt_test
