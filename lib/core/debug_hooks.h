#pragma once
// Testing aids read from the environment, so the tests of interruptions hit the exact
// moment without sleeps (documented in docs/failure-behaviour.md):
//   XMC_DEBUG_KILL_AT=POINT:EPOCH   SIGKILL the process at that point of that epoch
//                                   (POINT: after_checkpoint, after_metrics)
//   XMC_DEBUG_SIGNAL_AT=SIG:STEP    raise SIGINT (SIG=INT) or SIGTERM (SIG=TERM) in the
//                                   process during global training step STEP
//   XMC_DEBUG_RANK=R                under mpirun: only the process of rank R obeys the two
//                                   above (its OMPI_COMM_WORLD_RANK or PMIX_RANK is R)
// Unset, they cost one getenv per call.
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace xmc {

// False when XMC_DEBUG_RANK names another rank than this process's.
inline bool debug_rank_matches() {
  const char* want = std::getenv("XMC_DEBUG_RANK");
  if (want == nullptr) return true;
  const char* mine = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mine == nullptr) mine = std::getenv("PMIX_RANK");
  return mine != nullptr && std::string_view(mine) == want;
}

inline void debug_kill_point(std::string_view point, int64_t epoch) {
  const char* want = std::getenv("XMC_DEBUG_KILL_AT");
  if (want == nullptr || !debug_rank_matches()) return;
  if (std::string(point) + ":" + std::to_string(epoch) == want) std::raise(SIGKILL);
}

inline void debug_signal_point(int64_t step) {
  const char* want = std::getenv("XMC_DEBUG_SIGNAL_AT");
  if (want == nullptr || !debug_rank_matches()) return;
  const std::string s = std::to_string(step);
  if ("INT:" + s == want) std::raise(SIGINT);
  if ("TERM:" + s == want) std::raise(SIGTERM);
}

}  // namespace xmc
