// Overlapping params refused (kopt/impl/param_overlaps.hpp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <kopt/error.hpp>
#include <kopt/impl/param_overlaps.hpp>
#include <optional>

namespace kopt::Impl {

namespace {

struct Span {
  std::uintptr_t lo, hi;  // [lo, hi)
  const std::string* name;
  bool grad;
};

// The span of `t`, or none when it holds no memory.
std::optional<Span> span_of(const Tensor& t, const std::string* name, bool grad) {
  if (t.is_null() || t.numel <= 0) return std::nullopt;
  const auto lo = reinterpret_cast<std::uintptr_t>(t.data);
  return Span{lo, lo + t.bytes(), name, grad};
}

// A param's spans, in a fixed array (set_grad() checks on every call: no heap).
struct Spans {
  std::array<Span, 2> at{};
  std::size_t n = 0;
  explicit Spans(const NamedBuffers& p) {
    for (const auto& s : {span_of(p.param, p.name, false), span_of(p.grad, p.name, true)})
      if (s) at[n++] = *s;
  }
  const Span* begin() const { return at.data(); }
  const Span* end() const { return at.data() + n; }
};

std::string what(const Span& s) { return (s.grad ? "the grad of '" : "'") + *s.name + "'"; }

[[noreturn]] void refuse(const char* who, const Span& a, const Span& b) {
  // A param first: "'a' overlaps the grad of 'b'".
  const Span& first = a.grad ? b : a;
  const Span& second = a.grad ? a : b;
  KOPT_THROW_IF_AS(InvalidArgument, true,
                   who << ": parameter " << what(first) << " overlaps " << what(second)
                       << " in memory: each param needs memory of its own (a tied weight is "
                       << "one param: add it once), and its grad must not be a param");
  std::abort();  // not reached
}

bool overlap(const Span& a, const Span& b) { return a.lo < b.hi && b.lo < a.hi; }

}  // namespace

void check_no_overlaps(const std::vector<NamedBuffers>& params, const char* who) {
  std::vector<Span> spans;
  spans.reserve(2 * params.size());
  for (const NamedBuffers& p : params)
    for (const Span& s : Spans(p)) spans.push_back(s);
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span& a, const Span& b) { return a.lo < b.lo; });
  // Sweep in address order, keeping the param and the grad that reach furthest so far: a
  // span that starts below the reach of a param overlaps it; a param that starts below the
  // reach of a grad overlaps that grad. Grads overlapping grads are allowed.
  const Span* param = nullptr;
  const Span* grad = nullptr;
  for (const Span& s : spans) {
    if (param != nullptr && s.lo < param->hi) refuse(who, *param, s);
    if (!s.grad && grad != nullptr && s.lo < grad->hi) refuse(who, s, *grad);
    const Span*& reach = s.grad ? grad : param;
    if (reach == nullptr || s.hi > reach->hi) reach = &s;
  }
}

void check_no_overlaps_with(const NamedBuffers& p, const std::vector<NamedBuffers>& params,
                            const char* who) {
  const Spans mine(p);
  if (mine.n == 2 && overlap(mine.at[0], mine.at[1])) refuse(who, mine.at[0], mine.at[1]);
  for (const NamedBuffers& q : params) {
    if (*q.name == *p.name) continue;
    const Spans theirs(q);
    for (const Span& a : mine)
      for (const Span& b : theirs)
        if ((!a.grad || !b.grad) && overlap(a, b)) refuse(who, a, b);
  }
}

}  // namespace kopt::Impl
