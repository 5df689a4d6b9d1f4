#pragma once
/// \file
/// Params whose memory overlaps: refused. A training code that ties weights (an embedding
/// shared with the output layer) or hands the same buffer twice under two names would have
/// it updated twice per step, with two states, silently; torch refuses a param in two groups.
/// kopt looks nothing up by pointer (names are the keys), so it checks the addresses once.

#include <kopt/tensor.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

/// A named param and its grad (either may be null or empty: it holds no memory).
struct NamedBuffers {
  const std::string* name;
  Tensor param, grad;
};

/// Throws kopt::InvalidArgument naming both when a param's memory overlaps another param's,
/// its own grad's or another param's grad (grads may share memory: they are only read).
/// O(n log n); `who` starts the message.
void check_no_overlaps(const std::vector<NamedBuffers>& params, const char* who);

/// The same for one param `p` (new memory for it, from rebind() or set_grad()) against the
/// others in `params` (p's own entry there, by name, is skipped): O(n).
void check_no_overlaps_with(const NamedBuffers& p, const std::vector<NamedBuffers>& params,
                            const char* who);

}  // namespace kopt::Impl
