#pragma once
/// \file
/// The one case where a master kept as a remainder (MasterStorage::remainder) cannot come
/// back from a file by itself: weights saved beside an fp32 master round an exact tie with
/// an odd high half to even, one bf16 ulp above the high half the remainder needs
/// (param_remainder.hpp). Such elements (about one in 131,072) are noted when the state is
/// written, and settled at the param's next update, whether the weights come before or after.

#include <algorithm>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace kopt::Impl {

/// Copies `bytes` bytes between any two memory spaces this build has (blocks until done).
void copy_bytes(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space,
                std::size_t bytes);

class LoadedTies {
 public:
  struct Tie {
    std::int64_t element;
    float master;
  };

  /// Entry i's masters [offset, offset + count) were loaded: forgets what was noted there,
  /// notes the odd ties among them.
  void note(std::size_t i, std::int64_t offset, std::int64_t count, const float* masters) {
    std::vector<Tie>& ties = ties_[i];
    std::erase_if(ties, [&](const Tie& t) {
      return t.element >= offset && t.element - offset < count;  // written again
    });
    for (std::int64_t k = 0; k < count; ++k)
      if (split_master(masters[k]).param.bits != bfloat16::from_float(masters[k]).bits)
        ties.push_back(Tie{offset + k, masters[k]});
    if (ties.empty()) ties_.erase(i);
  }

  /// Whether a param that reads `param` takes the loaded master `master`: its weights are
  /// those saved with it, rounded to even.
  static bool takes(bfloat16 param, float master) {
    return param.bits == bfloat16::from_float(master).bits;
  }

  /// The ties of entry i still to settle.
  const std::vector<Tie>& of(std::size_t i) const {
    static const std::vector<Tie> none;
    const auto it = ties_.find(i);
    return it == ties_.end() ? none : it->second;
  }

  /// Before the update of the entries with updated(i): each noted element whose param holds
  /// the file's weights rounded to even gets the param its master splits into, so the update
  /// starts from the loaded master (other weights: the remainder follows them). Blocks, only
  /// after a load that had ties.
  template <class Exec, class Updated>
  void settle(const Exec& exec, const std::string& label, const ParamRegistry& registry,
              Updated&& updated) {
    if (ties_.empty()) return;
    fence(exec, label + "::settle_ties");  // updates enqueued before may write the params
    for (auto it = ties_.begin(); it != ties_.end();) {
      if (!updated(it->first)) {
        ++it;
        continue;
      }
      auto* param = static_cast<unsigned char*>(registry[it->first].param.data);
      const MemorySpace space = registry[it->first].param.space;
      for (const Tie& t : it->second) {
        bfloat16 p;
        copy_bytes(&p, MemorySpace::host, param + sizeof p * t.element, space, sizeof p);
        if (!takes(p, t.master)) continue;
        p = split_master(t.master).param;
        copy_bytes(param + sizeof p * t.element, space, &p, MemorySpace::host, sizeof p);
      }
      it = ties_.erase(it);
    }
  }

 private:
  std::unordered_map<std::size_t, std::vector<Tie>> ties_;  ///< per entry
};

}  // namespace kopt::Impl
