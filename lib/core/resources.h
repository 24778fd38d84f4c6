#pragma once
// Process resources and timing.
#include <chrono>
#include <cstdint>

namespace xmc {

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
int64_t peak_rss_bytes();
// Current resident set size in bytes (VmRSS), 0 if unknown.
int64_t current_rss_bytes();

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace xmc
