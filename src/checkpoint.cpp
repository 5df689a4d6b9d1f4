// HybridOptimizer::save and ::load (format: docs/checkpoint-format.md). Load reads and checks
// everything, on every rank, before any rank changes anything.
#include <algorithm>
#include <filesystem>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/checkpoint_stream.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/profiling.hpp>
#include <kopt/impl/rank_agreement.hpp>
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

// `error` (a caught exception's message, empty: none) as a CheckpointError; `error` is a
// whole message already (prefix, file and line): wrapping it again would read "kopt: kopt:
// ... [checkpoint.cpp:N]".
std::exception_ptr checkpoint_error(const std::string& error) {
  if (error.empty()) return nullptr;
  return std::make_exception_ptr(
      CheckpointError(error.rfind("kopt", 0) == 0 ? error : "kopt: " + error));
}

// Throws on every rank when one failed: its own error there, "<what> failed on rank R: ..."
// on the others; and when `lines` differ between ranks.
void agree(Communicator& comm, const std::string& error, const std::string& what,
           const std::string& lines = "") {
  Impl::agree_across_ranks(comm, what, checkpoint_error(error), lines,
                           "every rank loads the same checkpoint");
}

std::int64_t global_numel(const Tensor& t) { return t.is_shard() ? t.global_numel : t.numel; }

// "rows x cols", or for a param without a shape (rows < 0) what it is taken as.
std::string shape_text(std::int64_t rows, std::int64_t cols) {
  return rows < 0 ? std::string("a vector (no shape)")
                  : std::to_string(rows) + " x " + std::to_string(cols);
}
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();  // no engine here

// Refuses a checkpoint holding params this optimizer lacks (known[i]: index param i is one
// of its own), naming the first few of them: a user looks for them by name.
void check_all_known(const Impl::Index& index, const std::vector<bool>& known,
                     const std::string& index_file) {
  const auto extra = static_cast<std::size_t>(std::count(known.begin(), known.end(), false));
  if (extra == 0) return;
  constexpr std::size_t listed = 3;
  std::string names;
  for (std::size_t i = 0, n = 0; i < known.size() && n < listed; ++i)
    if (!known[i]) names += (n++ == 0 ? "'" : ", '") + index.params[i].name + "'";
  KOPT_THROW_IF_AS(CheckpointError, true,
                   index_file << ": holds " << extra << " params this optimizer does not have ("
                              << names << (extra > listed ? ", ..." : "")
                              << "; LoadOptions::partial ignores them)");
}
}  // namespace

Communicator& HybridOptimizer::world_() { return shards_->communicator(); }

void HybridOptimizer::save(const std::string& path) {
  Impl::require_kokkos("kopt::HybridOptimizer::save");
  const Impl::ProfilingRegion region(Impl::regions::save);
  check_alive_("save");  // a moved-from optimizer has no world to agree with
  Communicator& comm = world_();
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const std::string what = "kopt::HybridOptimizer::save of " + path;
  // One saver per directory: rank 0 holds the lock from before any rank writes until the
  // clean-up is done (a second saver's clean-up would otherwise remove this one's files).
  std::optional<Impl::DirectoryLock> lock;
  const std::exception_ptr failed = Impl::outcome_of([&] {
    check_consistent_("save");  // never replace a good checkpoint with a half-updated state
    // Nor with configs that load() refuses (a field set out of range since the last step).
    check_configs_("save");
    KOPT_THROW_IF(path.empty(), "kopt::HybridOptimizer::save: the path is empty");
    try {
      fs::create_directories(path);
      if (rank == 0) lock.emplace(path);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::rethrow_exception(checkpoint_error(e.what()));
    }
  });
  Impl::agree_across_ranks(comm, what, failed, "");
  std::string error;  // of the writes below
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
  std::vector<Impl::IndexBlock> blocks;
  const std::string data_file = (fs::path(path) / Impl::data_file_name(generation, rank)).string();
  bool wrote_data = false;
  try {
    for (std::size_t g = 0; g < groups_.size(); ++g) index.groups.push_back(groups_[g].algorithm());
    Impl::StateWriter writer(data_file, generation, rank);
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (const ParamSpec& p : groups_[g].params()) {
        const Placement& at = find_(p.name);
        const auto arrays =
            static_cast<std::uint8_t>(held_arrays_[g] | Impl::arrays_of(groups_[g].algorithm()));
        const bool has_master = p.param.dtype != DType::f32;
        Impl::IndexParam q{p.name,
                           static_cast<std::uint32_t>(g),
                           p.param.dtype,
                           global_numel(p.param),
                           step_count(p.name),
                           arrays,
                           has_master};
        // As the group stores them. q8 arrays as codes where every piece of the param
        // starts on one of its blocks (whole params, and the pieces ShardLayout cuts, which
        // align q8 groups on blocks): the file's blocks are then the engines', and a load
        // gets the same values back. A piece the training code cut (Tensor::shard_of) may
        // start anywhere: its q8 arrays go to the file as their values, in f32.
        unsigned q8_roots = 0;
        for (std::size_t k = 0; k < q.array_dtypes.size(); ++k) {
          const DType d = groups_[g].storage().dtype_of(k);
          q.array_dtypes[k] = d == DType::q8 && p.param.is_shard() ? DType::f32 : d;
          if (d == DType::q8 && Impl::q8_root(groups_[g].algorithm(), k)) q8_roots |= 1u << k;
        }
        q.rows = p.param.rows, q.cols = p.param.cols;
        q.tensor_state = static_cast<std::uint64_t>(Impl::tensor_state_size(
            groups_[g].algorithm(), p.param.rows, p.param.cols, global_numel(p.param)));
        index.params.push_back(q);
        if (at.engine == kNone) continue;
        const Tensor piece = shards_->local_param(at.ordinal);
        Impl::IndexBlock block{static_cast<std::uint32_t>(index.params.size() - 1),
                               piece.global_offset, piece.numel, rank};
        // Streamed from the engine a span at a time (an array it does not keep yet, e.g.
        // the amsgrad max switched on since the last step, reads as the zeros it would
        // start from; one switched off since keeps its values, and they are saved).
        std::vector<float> tensor_state;  // a param with it is whole here (ShardPlan)
        if (q.tensor_state != 0) tensor_state = engines_[at.engine]->tensor_state(p.name);
        KOPT_THROW_IF(tensor_state.size() != q.tensor_state,
                      what << ": parameter '" << p.name << "' holds " << tensor_state.size()
                           << " floats of per-param state, " << q.tensor_state << " expected");
        writer.append(*engines_[at.engine], p.name, piece.numel,
                      Impl::block_arrays(arrays, has_master), q.array_dtypes, q8_roots, block,
                      tensor_state);
        blocks.push_back(block);
      }
    writer.commit();
    wrote_data = true;
  } catch (const std::bad_alloc&) {
    error = what + ": out of host memory saving rank " + std::to_string(rank) + "'s state (" +
            std::to_string(blocks.size()) + " blocks written)";
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
  const auto all_blocks = Impl::gather_bytes(comm, Impl::serialize_blocks(blocks));
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

void HybridOptimizer::load(const std::string& path, const LoadOptions& options) {
  Impl::require_kokkos("kopt::HybridOptimizer::load");
  const Impl::ProfilingRegion region(Impl::regions::load);
  check_alive_("load");
  Communicator& comm = world_();
  const std::string index_file = (fs::path(path) / Impl::kIndexName).string();
  std::vector<AlgorithmConfig> configs(groups_.size());
  std::vector<bool> config_found(groups_.size(), false);
  std::vector<std::int64_t> steps(where_.size(), -1);  // -1: not set by the load
  std::vector<unsigned> arrays(groups_.size(), 0);     // per group: those the file holds
  // The local pieces to read, checked now and applied once every rank checked its own; and
  // (partial) those of params the file lacks, which start afresh.
  struct Piece {
    bool fresh;
    std::uint32_t in_file;
    std::int64_t offset, numel;
    std::size_t engine;
    const std::string* name;
  };
  std::vector<Piece> pieces;
  Impl::Index index;
  Impl::StateReader reader(path, index);  // holds the data files open until applied
  std::string error, reading = "the index";
  std::string generation;  // the save's: every rank loads the same one
  try {
    KOPT_THROW_IF(path.empty(), "kopt::HybridOptimizer::load: the path is empty");
    index = Impl::parse_index(Impl::read_file(index_file), index_file);
    generation = "the checkpoint saved as generation " + std::to_string(index.generation);
    std::unordered_map<std::string, std::uint32_t> in_file;  // names are unique (check_index)
    in_file.reserve(index.params.size());
    for (std::uint32_t i = 0; i < index.params.size(); ++i)
      in_file.emplace(index.params[i].name, i);
    std::vector<bool> known(index.params.size(), false);
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (const ParamSpec& p : groups_[g].params()) {
        const Placement& at = find_(p.name);
        const auto it = in_file.find(p.name);
        if (it == in_file.end()) {
          KOPT_THROW_IF_AS(CheckpointError, !options.partial,
                           index_file << ": has no param '" << p.name
                                      << "' (LoadOptions::partial gives it fresh state)");
          // As in a new optimizer, whatever it held: a load then gives the same state into
          // a stepped optimizer as into a new one, and the master follows the weights.
          steps[at.ordinal] = 0;
          if (at.engine != kNone)
            pieces.push_back(
                {true, 0, 0, shards_->local_param(at.ordinal).numel, at.engine, &p.name});
          continue;
        }
        known[it->second] = true;
        const Impl::IndexParam& q = index.params[it->second];
        KOPT_THROW_IF_AS(
            CheckpointError, q.dtype != p.param.dtype || q.global_numel != global_numel(p.param),
            index_file << ": param '" << p.name << "' was saved as " << name_of(q.dtype) << "["
                       << q.global_numel << "], it is " << name_of(p.param.dtype) << "["
                       << global_numel(p.param) << "]");
        const AlgorithmConfig& saved = index.groups[q.group];
        KOPT_THROW_IF_AS(CheckpointError, saved.index() != groups_[g].algorithm().index(),
                         index_file << ": param '" << p.name << "' was saved by "
                                    << algorithm_name(saved) << ", its group " << g << " runs "
                                    << algorithm_name(groups_[g].algorithm())
                                    << " (state of one algorithm does not load into another)");
        KOPT_THROW_IF_AS(CheckpointError, config_found[g] && !(configs[g] == saved),
                         index_file << ": group " << g << " holds params saved with different "
                                    << "configs ('" << p.name << "' and an earlier one)");
        // Per-param state (Adafactor's) fits the param's shape only: a matrix saved with
        // another shape, or as a vector, does not load into it.
        const auto want = static_cast<std::uint64_t>(
            Impl::tensor_state_size(saved, p.param.rows, p.param.cols, global_numel(p.param)));
        const bool reshaped = Impl::needs_whole_tensors(saved) && q.rows != -1 &&
                              (q.rows != p.param.rows || q.cols != p.param.cols);
        KOPT_THROW_IF_AS(CheckpointError, reshaped || q.tensor_state != want,
                         index_file << ": param '" << p.name << "' was saved as "
                                    << shape_text(q.rows, q.cols) << " with " << q.tensor_state
                                    << " floats of per-param state; it is "
                                    << shape_text(p.param.rows, p.param.cols) << ", which "
                                    << algorithm_name(saved) << " keeps " << want << " for");
        configs[g] = saved;
        config_found[g] = true;
        arrays[g] |= q.arrays;
        steps[at.ordinal] = q.step;
        if (at.engine == kNone) continue;
        const Tensor piece = shards_->local_param(at.ordinal);
        reading = p.name;
        reader.check(it->second, piece.global_offset, piece.numel);
        pieces.push_back({false, it->second, piece.global_offset, piece.numel, at.engine, &p.name});
      }
    if (!options.partial) check_all_known(index, known, index_file);
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (config_found[g]) kopt::validate(configs[g]);
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
    error = index_file + ": out of host memory reading the state of '" + reading + "'";
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(comm, error, "kopt::HybridOptimizer::load of " + path, generation);

  // Everything is checked on every rank. Allocate whatever state is missing first (a
  // failure there changes nothing), then apply, streaming each piece from the files again
  // (still open: a later save's clean-up cannot take them away): only an I/O or backend
  // error can stop that half-way, and then the optimizer says so instead of running on a
  // mix of states.
  // The engines keep every array the file holds (a group's config may have switched one
  // off since it was saved: it keeps its values until switched on again).
  // The allocations may fail on one rank only: the ranks agree again, so that none applies
  // the file while another keeps its old state.
  const std::exception_ptr failed = Impl::outcome_of([&] {
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      unsigned held = 0;
      for (std::size_t g = 0; g < groups_.size(); ++g)
        if (engine_group_[e][g] != kNone) held |= arrays[g];
      engines_[e]->keep_state_arrays(held);
    }
    for (const auto& engine : engines_) engine->prepare_step();
  });
  Impl::agree_across_ranks(comm, "kopt::HybridOptimizer::load of " + path, failed, "");
  try {
    apply_loaded_(configs, config_found, steps, arrays);
    for (const Piece& q : pieces)
      if (q.fresh)
        Impl::apply_fresh(*engines_[q.engine], *q.name, q.numel);
      else
        reader.apply(q.in_file, q.offset, q.numel, *engines_[q.engine], *q.name);
  } catch (...) {
    failed_step_ = "a load() failed part-way (" + Impl::what_of_current() + ")";
    throw;
  }
  if (index.has_scaler && scaler_) scaler_->restore(index.scale, index.growth_tracker);
  // Every param's state came from the file or starts afresh: whatever an earlier failure
  // left is gone.
  failed_step_.clear();
}

void HybridOptimizer::apply_loaded_(const std::vector<AlgorithmConfig>& configs,
                                    const std::vector<bool>& config_found,
                                    const std::vector<std::int64_t>& steps,
                                    const std::vector<unsigned>& arrays) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (config_found[g]) groups_[g].set_algorithm(configs[g]);  // the same algorithm (checked)
    held_arrays_[g] |= arrays[g];
  }
  for (std::size_t e = 0; e < engines_.size(); ++e)
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (engine_group_[e][g] != kNone)
        engines_[e]->set_config(engine_group_[e][g], groups_[g].algorithm());
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i] >= 0) steps_[i] = steps[i];
}

}  // namespace kopt
