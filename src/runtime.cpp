#include <Kokkos_Core.hpp>
#include <kopt/error.hpp>
#include <kopt/impl/backends.hpp>
#include <kopt/runtime.hpp>
#include <kopt/version.hpp>
#include <sstream>

namespace kopt {

std::vector<std::string> enabled_spaces() {
  std::vector<std::string> spaces;
  Impl::for_each_backend([&](auto space) { spaces.emplace_back(decltype(space)::type::name()); });
  return spaces;
}

std::string build_info() {
  std::ostringstream out;
  out << "kopt " << KOPT_VERSION_STRING << " (Kokkos " << KOKKOS_VERSION / 10000 << '.'
      << KOKKOS_VERSION / 100 % 100 << '.' << KOKKOS_VERSION % 100 << ':';
  for (const auto& s : enabled_spaces()) out << ' ' << s;
  out << ')';
  return out.str();
}

}  // namespace kopt

namespace kopt::Impl {

std::string what_of_current() {
  try {
    throw;
  } catch (const std::exception& e) {
    return embedded(e.what());
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

void require_kokkos(const char* who) {
  KOPT_THROW_IF_AS(NotInitialized, !Kokkos::is_initialized(),
                   who << ": Kokkos is not initialized (or was already finalized): initialize it "
                       << "first (Kokkos::initialize, Kokkos::ScopeGuard or kopt_initialize) and "
                       << "destroy kopt objects before finalizing it");
#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION < 40000
  // Kokkos 3's OpenMP backend keeps its thread pool behind a thread-local pointer set on the
  // thread that initialized Kokkos: from any other thread it refuses to initialize a View
  // (the first step's allocations threw Kokkos' "uninitialized execution space") and runs
  // every kernel on one thread (later steps "worked", at a fraction of the speed). Refused
  // up front instead, before anything changes.
  KOPT_THROW_IF_AS(NotInitialized, !Kokkos::OpenMP::impl_is_initialized(),
                   who << ": called from a thread other than the one that initialized Kokkos "
                       << "(or from inside an OpenMP parallel region); with Kokkos 3's OpenMP "
                       << "backend, call kopt from the thread that initialized Kokkos");
#endif
}

}  // namespace kopt::Impl
