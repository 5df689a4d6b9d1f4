#include <algorithm>
#include <charconv>
#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/rank_agreement.hpp>
#include <new>
#include <sstream>

namespace kopt::Impl {

namespace {
// A failed rank's exception type, as a code the other ranks throw again.
enum class Kind : std::uint32_t {
  none,
  invalid_argument,
  shape_mismatch,
  not_compiled,
  checkpoint,
  backend,
  not_initialized,
  inconsistent_state,
  other,
};

Kind kind_of(const std::exception_ptr& failed) {
  if (!failed) return Kind::none;
  try {
    std::rethrow_exception(failed);
  } catch (const ShapeMismatch&) {
    return Kind::shape_mismatch;
  } catch (const NotCompiled&) {
    return Kind::not_compiled;
  } catch (const CheckpointError&) {
    return Kind::checkpoint;
  } catch (const BackendError&) {
    return Kind::backend;
  } catch (const NotInitialized&) {
    return Kind::not_initialized;
  } catch (const InconsistentState&) {
    return Kind::inconsistent_state;
  } catch (const InvalidArgument&) {
    return Kind::invalid_argument;
  } catch (...) {
    return Kind::other;
  }
}

[[noreturn]] void throw_as(Kind kind, const std::string& message) {
  switch (kind) {
    case Kind::invalid_argument:
      throw InvalidArgument(message);
    case Kind::shape_mismatch:
      throw ShapeMismatch(message);
    case Kind::not_compiled:
      throw NotCompiled(message);
    case Kind::checkpoint:
      throw CheckpointError(message);
    case Kind::backend:
      throw BackendError(message);
    case Kind::not_initialized:
      throw NotInitialized(message);
    case Kind::inconsistent_state:
      throw InconsistentState(message);
    default:
      throw Error(message);
  }
}

std::vector<std::string> split_lines(const std::vector<unsigned char>& bytes) {
  std::vector<std::string> lines;
  std::string line;
  for (const unsigned char c : bytes) {
    if (c != '\n') {
      line += static_cast<char>(c);
      continue;
    }
    lines.push_back(line);
    line.clear();
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::vector<unsigned char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// The shortest decimal that reads back as `x`: equal on two ranks only when `x` is.
std::string exact(double x) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), x).ptr;
  return std::string(text, end);
}

// The message of `failed` as the other ranks quote it: without its "kopt: ", with its
// "[file.cpp:N]", which names the check that fired.
std::string message_of(const std::exception_ptr& failed) {
  try {
    std::rethrow_exception(failed);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.rfind("kopt: ", 0) == 0 ? what.substr(6) : what;
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}
}  // namespace

std::vector<std::vector<unsigned char>> gather_bytes(Communicator& comm,
                                                     const std::vector<unsigned char>& mine) {
  const auto world = static_cast<std::size_t>(comm.size());
  const std::uint64_t n = mine.size();
  std::vector<std::uint64_t> sizes(world);
  comm.all_gather_bytes(&n, sizes.data(), std::vector<std::size_t>(world, sizeof(n)));
  const std::vector<std::size_t> bytes(sizes.begin(), sizes.end());
  std::size_t total = 0;
  for (const std::size_t b : bytes) total += b;
  std::vector<unsigned char> all(total);
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

void agree_across_ranks(Communicator& comm, const std::string& call, std::exception_ptr failed,
                        const std::string& lines, const std::string& rule) {
  struct Record {
    std::uint32_t kind;
    std::uint32_t crc;  // of `lines`, with its length: equal lines, equal records
    std::uint64_t length;
  };
  const auto world = static_cast<std::size_t>(comm.size());
  const Kind kind = kind_of(failed);
  const Record mine{static_cast<std::uint32_t>(kind), crc32c(lines.data(), lines.size()),
                    lines.size()};
  std::vector<Record> all(world);
  comm.all_gather_bytes(&mine, all.data(), std::vector<std::size_t>(world, sizeof(Record)));
  const auto first_failed = std::find_if(all.begin(), all.end(), [](const Record& r) {
    return r.kind != static_cast<std::uint32_t>(Kind::none);
  });
  if (first_failed != all.end()) {
    const auto messages = gather_bytes(comm, bytes_of(failed ? message_of(failed) : ""));
    if (failed) std::rethrow_exception(failed);
    // The failed rank's message keeps the tag of the check that fired; this one adds none.
    const auto r = static_cast<std::size_t>(first_failed - all.begin());
    throw_as(static_cast<Kind>(first_failed->kind),
             call + " failed on rank " + std::to_string(r) + ": " +
                 std::string(messages[r].begin(), messages[r].end()));
  }
  const auto differs = std::find_if(all.begin(), all.end(), [&](const Record& r) {
    return r.crc != all[0].crc || r.length != all[0].length;
  });
  if (differs == all.end()) return;
  const auto gathered = gather_bytes(comm, bytes_of(lines));
  const auto r = static_cast<std::size_t>(differs - all.begin());
  const std::vector<std::string> first = split_lines(gathered[0]), other = split_lines(gathered[r]);
  std::size_t i = 0;
  while (i < first.size() && i < other.size() && first[i] == other[i]) ++i;
  const auto quoted = [](const std::vector<std::string>& l, std::size_t k) {
    return k < l.size() ? "\"" + l[k] + "\"" : std::string("nothing more");
  };
  KOPT_THROW_IF(true, call << ": ranks differ in what must be the same on every rank: rank 0 has "
                           << quoted(first, i) << " where rank " << r << " has " << quoted(other, i)
                           << " (" << rule << ")");
}

void agree_on_arguments(HybridOptimizer& opt, const std::string& call, std::exception_ptr failed) {
  if (Communicator* peers = opt.peers_())
    agree_across_ranks(*peers, call, failed, "");
  else if (failed)
    std::rethrow_exception(failed);
}

std::string group_configs(const std::vector<ParamGroup>& groups) {
  std::string out;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out += "group " + std::to_string(g) + ": " + algorithm_name(groups[g].algorithm());
    std::visit(
        [&](auto c) {
          c.visit_fields([&](const char* name, auto& field) {
            out += std::string(" ") + name + " " + exact(static_cast<double>(field));
          });
        },
        groups[g].algorithm());
    out += '\n';
  }
  return out;
}

std::string rank_invariants(const std::vector<ParamGroup>& groups, const HybridOptions& options) {
  std::ostringstream out;
  if (const auto& s = options.sharding)
    out << "sharding: ZeRO stage " << (s->stage == ZeroStage::one ? 1 : 2) << ", grads "
        << (s->reduction == GradReduction::sum ? "summed" : "averaged") << '\n';
  out << "max_grad_norm: " << (options.max_grad_norm ? exact(*options.max_grad_norm) : "none")
      << '\n';
  out << "loss_scaling: ";
  if (const auto& s = options.loss_scaling)
    out << "init_scale " << exact(s->init_scale) << ", growth_factor " << exact(s->growth_factor)
        << ", backoff_factor " << exact(s->backoff_factor) << ", growth_interval "
        << s->growth_interval << '\n';
  else
    out << "none\n";
  out << group_configs(groups);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const ParamGroup& group = groups[g];
    out << "group " << g << ": " << name_of(group.placement()) << storage_form(group.storage())
        << ", seed " << group.storage().seed << '\n';
    for (const ParamSpec& p : group.params()) {
      out << "group " << g << " param '" << p.name << "': " << name_of(p.param.dtype) << ", "
          << (p.param.is_shard() ? p.param.global_numel : p.param.numel) << " elements";
      if (p.param.is_shard()) out << " (a piece on each rank)";
      if (p.param.is_matrix()) out << ", " << p.param.rows << " x " << p.param.cols;
      out << '\n';
    }
  }
  return out.str();
}

}  // namespace kopt::Impl
