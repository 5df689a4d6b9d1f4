#pragma once
/// \file
/// Options of HybridOptimizer::load. The format is documented in docs/checkpoint-format.md.

namespace kopt {

struct LoadOptions {
  /// Off (the default): the checkpoint and the optimizer must hold exactly the same param
  /// names, or load throws naming the first difference. On: params the file lacks keep
  /// their current (fresh) state, and params of the file the optimizer lacks are ignored.
  bool partial = false;
};

}  // namespace kopt
