// HybridOptimizer::save and ::load (format: docs/checkpoint-format.md). Load reads and checks
// everything, on every rank, before any rank changes anything.
#include <algorithm>
#include <filesystem>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/shard_plan.hpp>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>

namespace kopt {

namespace {
namespace fs = std::filesystem;

// Every rank's flag; throws on every rank when one failed, with that rank's message there.
void agree(Communicator& comm, const std::string& error, const std::string& what) {
  const unsigned char mine = error.empty() ? 0 : 1;
  std::vector<unsigned char> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather_bytes(&mine, all.data(), std::vector<std::size_t>(all.size(), 1));
  // `error` is a whole message already (prefix, file and line): wrapping it again would
  // read "kopt: kopt: ... [checkpoint.cpp:N]".
  if (!error.empty()) throw CheckpointError(error.rfind("kopt", 0) == 0 ? error : "kopt: " + error);
  for (std::size_t r = 0; r < all.size(); ++r)
    KOPT_THROW_IF_AS(CheckpointError, all[r] != 0, what << " failed on rank " << r);
}

// Every rank's bytes, one buffer per rank.
std::vector<std::vector<unsigned char>> gather(Communicator& comm,
                                               const std::vector<unsigned char>& mine) {
  const auto world = static_cast<std::size_t>(comm.size());
  const std::uint64_t n = mine.size();
  std::vector<std::uint64_t> sizes(world);
  comm.all_gather_bytes(&n, sizes.data(), std::vector<std::size_t>(world, sizeof(n)));
  std::vector<std::size_t> bytes(sizes.begin(), sizes.end());
  std::vector<unsigned char> all;
  std::size_t total = 0;
  for (const std::size_t b : bytes) total += b;
  all.resize(total);
  comm.all_gather_bytes(mine.data(), all.data(), bytes);
  std::vector<std::vector<unsigned char>> out;
  std::size_t at = 0;
  for (const std::size_t b : bytes) {
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + b));
    at += b;
  }
  return out;
}

std::int64_t global_numel(const Tensor& t) { return t.is_shard() ? t.global_numel : t.numel; }
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();  // no engine here
}  // namespace

Communicator& HybridOptimizer::world_() {
  static SingleProcessCommunicator one;  // stateless
  return shards_ ? shards_->communicator() : one;
}

void HybridOptimizer::save(const std::string& path) {
  Impl::require_kokkos("kopt::HybridOptimizer::save");
  check_consistent_("save");  // never replace a good checkpoint with a half-updated state
  Communicator& comm = world_();
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const std::string what = "kopt::HybridOptimizer::save of " + path;
  // One saver per directory: rank 0 holds the lock from before any rank writes until the
  // clean-up is done (a second saver's clean-up would otherwise remove this one's files).
  std::optional<Impl::DirectoryLock> lock;
  std::string error;
  try {
    fs::create_directories(path);
    if (rank == 0) lock.emplace(path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(comm, error, what);
  for (const auto& engine : engines_) engine->fence();
  // Rank 0 draws the generation that names this save's data files.
  std::uint64_t generation = std::random_device{}() ^ (std::uint64_t{std::random_device{}()} << 32);
  std::vector<std::uint64_t> drawn(static_cast<std::size_t>(comm.size()));
  comm.all_gather_bytes(&generation, drawn.data(), std::vector<std::size_t>(drawn.size(), 8));
  generation = drawn[0];

  Impl::Index index;
  index.generation = generation;
  index.world_size = static_cast<std::uint32_t>(comm.size());
  index.has_scaler = scaler_.has_value();
  index.scale = loss_scale();
  index.growth_tracker = scaler_ ? scaler_->growth_tracker() : 0;
  std::vector<unsigned char> data = Impl::data_file_header(generation, rank);
  std::vector<Impl::IndexBlock> blocks;
  Impl::HostParamState state;
  const std::string data_file = (fs::path(path) / Impl::data_file_name(generation, rank)).string();
  bool wrote_data = false;
  try {
    for (std::size_t g = 0; g < groups_.size(); ++g) index.groups.push_back(groups_[g].config());
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (const ParamSpec& p : groups_[g].params()) {
        const Placement& at = find_(p.name);
        const bool has_max = groups_[g].config().amsgrad;
        const bool has_master = p.param.dtype != DType::f32;
        index.params.push_back(Impl::IndexParam{p.name, static_cast<std::uint32_t>(g),
                                                p.param.dtype, global_numel(p.param),
                                                step_count(p.name), has_max, has_master});
        if (at.engine == kNone) continue;
        const Tensor piece = shards_ ? shards_->local_param(at.ordinal) : p.param;
        engines_[at.engine]->get_state(p.name, state);
        const std::size_t first = data.size();
        const auto n = static_cast<std::size_t>(piece.numel);
        // An array the engine does not keep yet (amsgrad switched on since the last step)
        // is saved as the zeros it would start from.
        const auto append = [&](const std::vector<float>& v) {
          if (v.size() == n)
            Impl::append_floats(data, v.data(), n);
          else
            data.resize(data.size() + 4 * n, 0);
        };
        append(state.exp_avg);
        append(state.exp_avg_sq);
        if (has_max) append(state.max_exp_avg_sq);
        if (has_master) append(state.master);
        blocks.push_back(Impl::IndexBlock{static_cast<std::uint32_t>(index.params.size() - 1),
                                          piece.global_offset, piece.numel, rank, first,
                                          data.size() - first,
                                          Impl::crc32c(data.data() + first, data.size() - first)});
      }
    Impl::write_file_atomically(data_file, data);
    wrote_data = true;
  } catch (const std::bad_alloc&) {
    error = what + ": out of host memory building rank " + std::to_string(rank) + "'s data file (" +
            std::to_string(data.size()) + " bytes so far)";
  } catch (const std::exception& e) {
    error = e.what();
  }
  // A failed save removes what it wrote (its data file has a fresh generation, named by no
  // index): the previous checkpoint stays as it was, and a retry starts clean.
  const auto discard = [&] {
    std::error_code ec;
    if (wrote_data) fs::remove(data_file, ec);
  };
  try {
    agree(comm, error, what);
  } catch (...) {
    discard();
    throw;
  }
  // Rank 0 writes the index only once every data file is in place: until its rename the
  // previous checkpoint (index and data files) stays whole.
  const auto all_blocks = gather(comm, Impl::serialize_blocks(blocks));
  if (rank == 0) {
    try {
      for (const auto& b : all_blocks) {
        const auto list = Impl::parse_blocks(b.data(), b.size());
        index.blocks.insert(index.blocks.end(), list.begin(), list.end());
      }
      Impl::write_file_atomically((fs::path(path) / Impl::kIndexName).string(),
                                  Impl::serialize_index(index));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    agree(comm, error, what);
  } catch (...) {
    discard();
    throw;
  }
  // What the new index no longer names: older data files, torn temporaries; never a file
  // this format did not write.
  if (rank == 0) Impl::remove_stale_files(path, generation);
}

namespace {
// The state of elements [offset, offset + n) of one param, assembled from the blocks that
// cover them (written at any world size); each block is read whole and its checksum checked.
struct BlockReader {
  std::string dir;
  const Impl::Index& index;
  std::map<std::uint32_t, std::unique_ptr<Impl::ReadOnlyFile>> files;  // by rank, header checked

  std::vector<unsigned char> read(const Impl::IndexBlock& b) {
    auto& file = files[b.rank];
    if (!file) {
      auto opened = std::make_unique<Impl::ReadOnlyFile>(
          (fs::path(dir) / Impl::data_file_name(index.generation, b.rank)).string());
      const auto head = opened->read(0, Impl::kDataHeaderBytes);
      Impl::check_data_header(head.data(), head.size(), index.generation, b.rank, opened->path());
      file = std::move(opened);
    }
    auto bytes = file->read(b.file_offset, b.bytes);
    KOPT_THROW_IF_AS(CheckpointError, Impl::crc32c(bytes.data(), bytes.size()) != b.crc,
                     file->path() << ": checksum mismatch in the data of '"
                                  << index.params[b.param].name << "' (corrupt file)");
    return bytes;
  }

  void assemble(std::uint32_t param, std::int64_t offset, std::int64_t n,
                Impl::HostParamState& out) {
    const Impl::IndexParam& p = index.params[param];
    const auto count = static_cast<std::size_t>(n);
    for (auto* v : {&out.exp_avg, &out.exp_avg_sq}) v->assign(count, 0.0f);
    out.max_exp_avg_sq.assign(p.has_max ? count : 0, 0.0f);
    out.master.assign(p.has_master ? count : 0, 0.0f);
    out.step = p.step;
    std::int64_t covered = 0;
    for (std::size_t k = index.first_block[param]; k < index.first_block[param + 1]; ++k) {
      const Impl::IndexBlock& b = index.blocks[k];  // this param's, by offset
      const std::int64_t lo = std::max(offset, b.global_offset);
      const std::int64_t hi = std::min(offset + n, b.global_offset + b.length);
      if (lo >= hi) continue;
      const std::vector<unsigned char> bytes = read(b);
      const auto len = static_cast<std::size_t>(b.length);
      const auto skip = static_cast<std::size_t>(lo - b.global_offset) * 4;
      std::size_t array = 0;
      for (auto* v : {&out.exp_avg, &out.exp_avg_sq, &out.max_exp_avg_sq, &out.master}) {
        if (v->empty()) continue;
        Impl::read_floats(bytes.data() + array * len * 4 + skip,
                          v->data() + static_cast<std::size_t>(lo - offset),
                          static_cast<std::size_t>(hi - lo));
        ++array;
      }
      covered += hi - lo;
    }
    KOPT_THROW_IF_AS(CheckpointError, covered != n,
                     dir << ": the state of '" << p.name << "' elements " << offset << " to "
                         << offset + n << " is not (exactly once) in the checkpoint");
  }
};
}  // namespace

void HybridOptimizer::load(const std::string& path, const LoadOptions& options) {
  Impl::require_kokkos("kopt::HybridOptimizer::load");
  KOPT_THROW_IF_AS(InvalidArgument, !alive_.yes,
                   "kopt::HybridOptimizer::load: this optimizer was moved from; it holds no "
                   "params or state");
  Communicator& comm = world_();
  const std::string index_file = (fs::path(path) / Impl::kIndexName).string();
  std::vector<AdamConfig> configs(groups_.size());
  std::vector<bool> config_found(groups_.size(), false);
  std::vector<std::int64_t> steps(where_.size(), -1);                // -1: not in the file
  std::vector<std::pair<std::size_t, Impl::HostParamState>> states;  // by ordinal
  Impl::Index index;
  std::string error, reading = "the index";
  try {
    index = Impl::parse_index(Impl::read_file(index_file), index_file);
    std::unordered_map<std::string, std::uint32_t> in_file;  // names are unique (check_index)
    in_file.reserve(index.params.size());
    for (std::uint32_t i = 0; i < index.params.size(); ++i)
      in_file.emplace(index.params[i].name, i);
    std::size_t known = 0;
    BlockReader reader{path, index, {}};
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (const ParamSpec& p : groups_[g].params()) {
        const Placement& at = find_(p.name);
        const auto it = in_file.find(p.name);
        if (it == in_file.end()) {
          KOPT_THROW_IF_AS(CheckpointError, !options.partial,
                           index_file << ": has no param '" << p.name
                                      << "' (LoadOptions::partial keeps fresh state for it)");
          continue;
        }
        ++known;
        const Impl::IndexParam& q = index.params[it->second];
        KOPT_THROW_IF_AS(
            CheckpointError, q.dtype != p.param.dtype || q.global_numel != global_numel(p.param),
            index_file << ": param '" << p.name << "' was saved as " << name_of(q.dtype) << "["
                       << q.global_numel << "], it is " << name_of(p.param.dtype) << "["
                       << global_numel(p.param) << "]");
        const AdamConfig& saved = index.groups[q.group];
        KOPT_THROW_IF_AS(CheckpointError, config_found[g] && !(configs[g] == saved),
                         index_file << ": group " << g << " holds params saved with different "
                                    << "configs ('" << p.name << "' and an earlier one)");
        configs[g] = saved;
        config_found[g] = true;
        steps[at.ordinal] = q.step;
        if (at.engine == kNone) continue;
        const Tensor piece = shards_ ? shards_->local_param(at.ordinal) : p.param;
        states.emplace_back(at.ordinal, Impl::HostParamState{});
        reading = p.name;
        reader.assemble(it->second, piece.global_offset, piece.numel, states.back().second);
      }
    KOPT_THROW_IF_AS(CheckpointError, !options.partial && known != index.params.size(),
                     index_file << ": holds " << index.params.size() - known
                                << " params this optimizer does not have (LoadOptions::partial "
                                << "ignores them)");
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (config_found[g]) configs[g].validate();
    if (index.has_scaler && scaler_) {
      try {  // against this optimizer's scaler options (the growth interval)
        LossScaler(*options_.loss_scaling).restore(index.scale, index.growth_tracker);
      } catch (const InvalidArgument& e) {
        KOPT_THROW_IF_AS(CheckpointError, true,
                         index_file << ": its loss scaler state does not fit this optimizer's: "
                                    << Impl::embedded(e.what()));
      }
    }
  } catch (const std::bad_alloc&) {
    error = index_file + ": out of host memory reading the state of '" + reading +
            "' (this rank holds the whole state it loads on the host before applying it)";
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(comm, error, "kopt::HybridOptimizer::load of " + path);

  // Everything is checked on every rank. Allocate whatever state is missing first (a
  // failure there changes nothing), then apply: only a backend error can stop that half-way,
  // and then the optimizer says so instead of running on a mix of states.
  for (const auto& engine : engines_) engine->prepare_step();
  try {
    apply_loaded_(configs, config_found, steps, states);
  } catch (...) {
    failed_step_ = "a load() failed part-way (" + Impl::what_of_current() + ")";
    throw;
  }
  if (index.has_scaler && scaler_) scaler_->restore(index.scale, index.growth_tracker);
  // Every param's state came from the file: whatever an earlier failure left is gone.
  if (std::all_of(steps.begin(), steps.end(), [](std::int64_t s) { return s >= 0; }))
    failed_step_.clear();
}

void HybridOptimizer::apply_loaded_(
    const std::vector<AdamConfig>& configs, const std::vector<bool>& config_found,
    const std::vector<std::int64_t>& steps,
    const std::vector<std::pair<std::size_t, Impl::HostParamState>>& states) {
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (config_found[g]) groups_[g].config() = configs[g];
  for (std::size_t e = 0; e < engines_.size(); ++e)
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (engine_group_[e][g] != kNone)
        engines_[e]->config(engine_group_[e][g]) = groups_[g].config();
  std::vector<std::string> names(where_.size());
  for (const auto& [name, at] : where_) names[at.ordinal] = name;
  for (const auto& [ordinal, state] : states)
    engines_[where_.at(names[ordinal]).engine]->set_state(names[ordinal], state);
  if (shards_)
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (steps[i] >= 0) sharded_steps_[i] = steps[i];
}

}  // namespace kopt
