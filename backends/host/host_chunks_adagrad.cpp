// The host spaces' chunk loops of one algorithm, compiled once for Serial and OpenMP
// (kopt/impl/host_chunks.hpp): a file per algorithm, so a parallel build spreads them.
#include <kopt/fused_optimizer.hpp>

namespace kopt {
KOPT_HOST_CHUNK_FN(, Impl::AdagradPolicy)
}
