#pragma once
// Shared by the typed suites: the enabled execution spaces, and arrays that live in a
// space's memory with a host copy to fill and check.

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <kopt/impl/backends.hpp>
#include <kopt/kopt.hpp>
#include <random>
#include <string>
#include <vector>

namespace kopt_test {

// A float's bits and back, by memcpy (independent of kopt's own bit casts, which they check).
inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The execution spaces of this build (kopt/impl/backends.hpp), as a GoogleTest type list.
template <class Tuple>
struct GtestTypes;
template <class... Ts>
struct GtestTypes<std::tuple<Ts...>> {
  using type = ::testing::Types<Ts...>;
};
using EnabledSpaces = GtestTypes<kopt::Impl::BackendSpaces>::type;

// Readable names for typed tests: "Serial", "OpenMP", "Cuda".
struct SpaceName {
  template <class Space>
  static std::string GetName(int) {
    return Space::name();
  }
};

// `n` elements of T in the memory of execution space `Space`, plus a host copy.
template <class T, class Space>
struct SpaceArray {
  using memory_space = typename Space::memory_space;
  Kokkos::View<T*, memory_space> view;
  std::vector<T> host;

  explicit SpaceArray(std::size_t n, const std::string& label = "kopt_test::array")
      : view(label, n), host(n) {}
  void upload() {
    Kokkos::deep_copy(view, Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                host.data(), host.size()));
  }
  const std::vector<T>& download() {
    Kokkos::fence();
    Kokkos::deep_copy(
        Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(host.data(), host.size()),
        view);
    return host;
  }
  kopt::Tensor tensor() const { return kopt::Tensor(view); }
  std::size_t size() const { return host.size(); }
};

// Widened host values of a host array.
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = kopt::Impl::to_float(v[i]);
  return out;
}

// Host values of a state view.
template <class MemSpace>
std::vector<double> to_host(const Kokkos::View<const float*, MemSpace>& v) {
  Kokkos::fence();
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.extent(0));
}

// Uniform floats in [lo, hi), rounded to T.
template <class T>
void fill_uniform(std::vector<T>& v, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& x : v) x = kopt::Impl::from_float<T>(dist(rng));
}

// Runs `bad`, expects an exception of type E whose message contains `needle`.
template <class E, class F>
void expect_error(F&& bad, const std::string& needle) {
  try {
    bad();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace kopt_test
