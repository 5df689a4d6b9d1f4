#pragma once
/// \file
/// The check every algorithm's config runs on its fields (no Kokkos: configs are read by
/// host-only code such as the checkpoint parser).

#include <array>
#include <cmath>
#include <kopt/error.hpp>

namespace kopt::Impl {

/// Throws kopt::InvalidArgument "<config>.<field> = <value> is invalid: <rule>" unless
/// `value` is finite and `ok`.
inline void check_config_field(const char* config, const char* field, double value, bool ok,
                               const char* rule) {
  KOPT_THROW_IF(!std::isfinite(value) || !ok,
                config << "." << field << " = " << value << " is invalid: " << rule);
}

}  // namespace kopt::Impl
