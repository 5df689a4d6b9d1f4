// The plain loops (plain_loops.hpp): straightforward C++ with OpenMP, no kopt, no Kokkos. The
// 16-bit conversions are what such code uses: GCC's _Float16 for IEEE half (F16C with
// -march=native) and the usual round-to-nearest-even bit trick for bfloat16.
#include "plain_loops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace kopt_perf::plain {
namespace {

inline float bf16_to_float(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <class T>
float load(const T* a, std::int64_t i) {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    return bf16_to_float(a[i]);
  } else {
    return static_cast<float>(a[i]);
  }
}
template <class T>
void store(T* a, std::int64_t i, float x) {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    a[i] = float_to_bf16(x);
  } else {
    a[i] = static_cast<T>(x);
  }
}

// An uninitialized array, zeroed by the threads of the loops' static schedule.
template <class T>
std::unique_ptr<T[]> first_touched(std::int64_t n, int threads) {
  std::unique_ptr<T[]> a(new T[static_cast<std::size_t>(n)]);
  T* p = a.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) p[i] = T{};
  return a;
}

// fp32 params: P == float and no master. 16-bit params: the master w is the weight.
template <class P, class G, bool Amsgrad>
void adamw(P* p, const G* g, float* w, float* m, float* v, float* vmax, std::int64_t n,
           std::int64_t t, float grad_scale, const Hyper& h, int threads) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(h.beta2, static_cast<float>(t)));
  const float step_size = h.lr / bc1, decay = 1.0f - h.lr * h.weight_decay;
  const float a1 = 1.0f - h.beta1, a2 = 1.0f - h.beta2;
  // `simd`: the arrays do not overlap. Without it GCC versions the loop with runtime alias
  // checks and, past ten of them (amsgrad's extra array), leaves it scalar.
#pragma omp parallel for simd schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = load(g, i) * grad_scale;
    float x = std::is_same_v<P, float> ? load(p, i) : w[i];
    x *= decay;
    const float mi = h.beta1 * m[i] + a1 * gi;
    const float vi = h.beta2 * v[i] + a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float second = vi;
    if constexpr (Amsgrad) {
      second = std::max(vmax[i], vi);
      vmax[i] = second;
    }
    x -= step_size * mi / (std::sqrt(second) / bc2_sqrt + h.eps);
    if constexpr (!std::is_same_v<P, float>) w[i] = x;
    store(p, i, x);
  }
}

}  // namespace

struct AdamW::Arrays {
  std::unique_ptr<float[]> p32, w, m, v, vmax;
  std::unique_ptr<std::uint16_t[]> p16;
};

AdamW::AdamW(Elem param, Elem grad, bool amsgrad, std::int64_t n, int threads, const Hyper& hyper)
    : a_(std::make_unique<Arrays>()),
      param_(param),
      grad_(grad),
      amsgrad_(amsgrad),
      n_(n),
      threads_(threads),
      h_(hyper) {
  if (param == Elem::f32) {
    a_->p32 = first_touched<float>(n, threads);
  } else {
    a_->p16 = first_touched<std::uint16_t>(n, threads);
    a_->w = first_touched<float>(n, threads);
  }
  a_->m = first_touched<float>(n, threads);
  a_->v = first_touched<float>(n, threads);
  if (amsgrad) a_->vmax = first_touched<float>(n, threads);
}

AdamW::~AdamW() = default;

void AdamW::step(const void* grad, float grad_scale) {
  ++t_;
  Arrays& a = *a_;
  const auto run = [&](auto* p, const auto* g) {
    if (amsgrad_)
      adamw<std::remove_pointer_t<decltype(p)>,
            std::remove_cv_t<std::remove_pointer_t<decltype(g)>>, true>(
          p, g, a.w.get(), a.m.get(), a.v.get(), a.vmax.get(), n_, t_, grad_scale, h_, threads_);
    else
      adamw<std::remove_pointer_t<decltype(p)>,
            std::remove_cv_t<std::remove_pointer_t<decltype(g)>>, false>(
          p, g, a.w.get(), a.m.get(), a.v.get(), nullptr, n_, t_, grad_scale, h_, threads_);
  };
  const auto* g32 = static_cast<const float*>(grad);
  const auto* gb = static_cast<const std::uint16_t*>(grad);
  const auto* gh = static_cast<const _Float16*>(grad);
  auto* ph = reinterpret_cast<_Float16*>(a.p16.get());
  if (param_ == Elem::f32 && grad_ == Elem::f32)
    run(a.p32.get(), g32);
  else if (param_ == Elem::bf16 && grad_ == Elem::bf16)
    run(a.p16.get(), gb);
  else if (param_ == Elem::f16 && grad_ == Elem::f16)
    run(ph, gh);
  else if (param_ == Elem::bf16 && grad_ == Elem::f32)
    run(a.p16.get(), g32);
  else if (param_ == Elem::f16 && grad_ == Elem::f32)
    run(ph, g32);
  else
    throw std::invalid_argument("kopt_perf::plain::AdamW: no loop for this param/grad pair");
}

double sum_of_squares(const void* grad, Elem type, std::int64_t n, int threads) {
  double s = 0.0;
  const auto run = [&](const auto* g) {
#pragma omp parallel for simd schedule(static) reduction(+ : s) num_threads(threads)
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = load(g, i);
      s += x * x;
    }
  };
  switch (type) {
    case Elem::f32:
      run(static_cast<const float*>(grad));
      break;
    case Elem::bf16:
      run(static_cast<const std::uint16_t*>(grad));
      break;
    case Elem::f16:
      run(static_cast<const _Float16*>(grad));
      break;
  }
  return s;
}

}  // namespace kopt_perf::plain
