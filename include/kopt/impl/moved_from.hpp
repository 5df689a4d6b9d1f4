#pragma once
/// \file
/// Whether an optimizer still holds what it was given, or was moved from.

#include <utility>

namespace kopt::Impl {

/// False in a moved-from object (a moved-from optimizer holds no params or state): its
/// owner refuses calls that would otherwise do nothing silently (a step that updates no
/// param, a save that writes an empty checkpoint over a good one).
struct Alive {
  bool yes = true;
  Alive() = default;
  Alive(const Alive&) = default;
  Alive& operator=(const Alive&) = default;
  Alive(Alive&& o) noexcept : yes(std::exchange(o.yes, false)) {}
  Alive& operator=(Alive&& o) noexcept {
    // A self-move empties the owner's other members (std::vector's does): moved-from too,
    // so that its calls refuse instead of acting on nothing.
    yes = this != &o && std::exchange(o.yes, false);
    return *this;
  }
};

}  // namespace kopt::Impl
