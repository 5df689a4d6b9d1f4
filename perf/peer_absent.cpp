// Built instead of peer_libtorch.cpp when CMake found no libtorch.
#include "peers.hpp"

namespace kopt_perf {

std::unique_ptr<Peer> make_libtorch_peer(float*, float*, std::int64_t, const kopt::AdamConfig&,
                                         int) {
  return nullptr;
}

std::string libtorch_info() {
  return "not found: libtorch rows skipped (bash scripts/run-perf.sh --with-libtorch installs "
         "Debian's libtorch-dev)";
}

}  // namespace kopt_perf
