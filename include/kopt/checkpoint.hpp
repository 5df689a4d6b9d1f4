#pragma once
/// \file
/// Options of HybridOptimizer::load. The format is documented in docs/checkpoint-format.md.

namespace kopt {

struct LoadOptions {
  /// Off (the default): the checkpoint and the optimizer must hold exactly the same param
  /// names, or load throws naming the first difference. On: params of the file the
  /// optimizer lacks are ignored, and params the file lacks get the state a new param
  /// starts from, whatever they held before: step count 0, zero state, and their masters
  /// taken from the params at their next step (so weights written before or after the load
  /// count). A partial load thus gives the same state into a stepped optimizer as into a
  /// new one.
  bool partial = false;
};

}  // namespace kopt
