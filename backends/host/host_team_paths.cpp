// The device path of every algorithm's update, compiled for the default host space, where
// only tests take it (kopt/impl/team_paths.hpp: ScopedTeamPaths runs it beside the host path
// and compares them bitwise). A file of its own so that it compiles unoptimized, in a quarter
// of the time the kernels users run take at -O3 (CMakeLists.txt).
#include <kopt/fused_optimizer.hpp>

namespace kopt {
KOPT_FOR_EACH_POLICY(KOPT_HOST_TEAM_PATHS, )
}
