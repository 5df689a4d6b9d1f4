#pragma once
/// \file
/// Collective calls of a sharded optimizer (its construction, step(), save(), load()) check
/// their input on each rank before the first collective that moves data. A check failing on
/// some ranks only would leave the others waiting forever in that collective, the failed rank
/// gone: so every rank first tells the others its outcome, and all of them throw together.
/// The same for what must be equal on every rank (groups, names, sizes, options): ranks that
/// disagree would cut the params differently and exchange mismatched buffers.
#include <cstdint>
#include <exception>
#include <kopt/communicator.hpp>
#include <string>
#include <vector>

namespace kopt {
struct HybridOptions;
class HybridOptimizer;
class ParamGroup;
}  // namespace kopt

namespace kopt::Impl {

/// What `check()` threw on this rank, or null: the outcome a rank brings to the agreement.
template <class Check>
std::exception_ptr outcome_of(Check&& check) noexcept {
  try {
    check();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

/// Every rank's bytes, one buffer per rank (two all-gathers: the sizes, then the bytes).
std::vector<std::vector<unsigned char>> gather_bytes(Communicator& comm,
                                                     const std::vector<unsigned char>& mine);

/// Makes every rank agree on the outcome of its checks (`failed`: what they threw on this rank,
/// or null) and on `lines` (what must be equal on every rank, a line per item), in one
/// all-gather of a small record per rank; more data moves only when something failed or
/// differs. Then, when any rank failed, every rank throws: a failed rank its own exception,
/// every other one an exception of the first failed rank's type (kopt's types; kopt::Error
/// for others) saying "<call> failed on rank R: <its message>". Else, when `lines` differ,
/// every rank throws kopt::InvalidArgument quoting the first line where rank 0 and the lowest
/// rank that differs from it part, and `rule`. Returns on every rank otherwise.
void agree_across_ranks(Communicator& comm, const std::string& call, std::exception_ptr failed,
                        const std::string& lines,
                        const std::string& rule =
                            "every rank builds the optimizer with the same "
                            "groups, names, sizes and options, and steps "
                            "with the same configs and null grads");

/// For calls of `opt` that are collective when it is sharded, from interfaces with checks of
/// their own before it (the C interface's arguments): `failed` (what those checks threw on
/// this rank, or null) agreed as agree_across_ranks does, in a sharded world of more than
/// one rank; elsewhere rethrown as it is.
void agree_on_arguments(HybridOptimizer& opt, const std::string& call, std::exception_ptr failed);

/// Each group's algorithm and hyperparameters, a line per group: the same on every rank at
/// every step of a sharded optimizer (a shard updated with its own rank's lr would leave
/// the gathered params a mix).
std::string group_configs(const std::vector<ParamGroup>& groups);

/// What must be the same on every rank of a sharded optimizer, a line per item: the sharding
/// and step options, each group's algorithm, hyperparameters, placement and storage form,
/// and each param's name, dtype, whole size and shape, in order.
std::string rank_invariants(const std::vector<ParamGroup>& groups, const HybridOptions& options);

}  // namespace kopt::Impl
