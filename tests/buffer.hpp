#pragma once
// A tensor of any kopt dtype in host or device memory (the default execution space's), set and
// read as doubles on the host. Values are rounded to the dtype on set(), so get() returns
// exactly what kopt sees.

#include <Kokkos_Core.hpp>
#include <cstring>
#include <kopt/kopt.hpp>
#include <vector>

namespace kopt_test {

using DeviceMem = Kokkos::DefaultExecutionSpace::memory_space;

struct Buffer {
  kopt::DType dtype = kopt::DType::f32;
  bool on_device = false;
  std::size_t n = 0;
  Kokkos::View<unsigned char*, Kokkos::HostSpace> host;
  Kokkos::View<unsigned char*, DeviceMem> device;

  Buffer() = default;
  Buffer(kopt::DType dt, bool dev, std::size_t count)
      : dtype(dt), on_device(dev), n(count), host("kopt_test::buffer", count * kopt::size_of(dt)) {
    if (on_device) device = decltype(device)("kopt_test::buffer", count * kopt::size_of(dt));
  }
  void set(const std::vector<double>& v) {
    for (std::size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(v[i]);
      unsigned char* at = host.data() + i * kopt::size_of(dtype);
      if (dtype == kopt::DType::f32) std::memcpy(at, &f, 4);
      const std::uint16_t b16 = kopt::bfloat16::from_float(f).bits;
      const std::uint16_t f16 = kopt::float16::from_float(f).bits;
      if (dtype == kopt::DType::bf16) std::memcpy(at, &b16, 2);
      if (dtype == kopt::DType::f16) std::memcpy(at, &f16, 2);
    }
    if (on_device) Kokkos::deep_copy(device, host);
  }
  std::vector<double> get() {
    Kokkos::fence();
    if (on_device) Kokkos::deep_copy(host, device);
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char* at = host.data() + i * kopt::size_of(dtype);
      float f = 0;
      std::uint16_t b = 0;
      if (dtype == kopt::DType::f32) std::memcpy(&f, at, 4);
      if (dtype != kopt::DType::f32) std::memcpy(&b, at, 2);
      if (dtype == kopt::DType::bf16) f = kopt::bfloat16{b}.to_float();
      if (dtype == kopt::DType::f16) f = kopt::float16{b}.to_float();
      v[i] = f;
    }
    return v;
  }
  // Sets element i to `x` (an Inf or NaN to inject).
  void poke(std::size_t i, double x) {
    std::vector<double> v = get();
    v[i] = x;
    set(v);
  }
  kopt::Tensor tensor() const {
    if (on_device)
      return kopt::Tensor(device.data(), static_cast<std::int64_t>(n), dtype,
                          kopt::memory_space_of<DeviceMem>());
    return kopt::Tensor(host.data(), static_cast<std::int64_t>(n), dtype, kopt::MemorySpace::host);
  }
};

}  // namespace kopt_test
