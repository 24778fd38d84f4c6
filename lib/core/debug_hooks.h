#pragma once
// Testing aids read from the environment, so the tests of interruptions hit the exact
// moment without sleeps (documented in docs/failure-behaviour.md):
//   XMC_DEBUG_KILL_AT=POINT:EPOCH   SIGKILL the process at that point of that epoch
//                                   (POINT: after_checkpoint, after_metrics)
//   XMC_DEBUG_SIGNAL_AT=SIG:STEP    raise SIGINT (SIG=INT) or SIGTERM (SIG=TERM) in the
//                                   process during global training step STEP
// Unset, they cost one getenv per call.
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace xmc {

inline void debug_kill_point(std::string_view point, int64_t epoch) {
  const char* want = std::getenv("XMC_DEBUG_KILL_AT");
  if (want == nullptr) return;
  if (std::string(point) + ":" + std::to_string(epoch) == want) std::raise(SIGKILL);
}

inline void debug_signal_point(int64_t step) {
  const char* want = std::getenv("XMC_DEBUG_SIGNAL_AT");
  if (want == nullptr) return;
  const std::string s = std::to_string(step);
  if ("INT:" + s == want) std::raise(SIGINT);
  if ("TERM:" + s == want) std::raise(SIGTERM);
}

}  // namespace xmc
