#pragma once
// Process resources and timing.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace xmc {

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
int64_t peak_rss_bytes();

// Host memory that new allocations may take, and where the figure comes from: the
// environment variable XMC_MEMORY_LIMIT when set (bytes, or a number with a K, M, G or T
// suffix, powers of 1024), else MemAvailable of /proc/meminfo. bytes = -1 when neither is
// known (then nothing is checked). A malformed XMC_MEMORY_LIMIT is an InputError.
struct MemoryBudget {
  int64_t bytes = -1;
  std::string source;  // "XMC_MEMORY_LIMIT" or "MemAvailable"
};
MemoryBudget memory_budget();

// A size in bytes with an optional K, M, G or T suffix (powers of 1024), written 8G, 8GB or
// 8GiB. InputError naming `what` (e.g. "--memory") otherwise.
int64_t parse_byte_size(const std::string& text, std::string_view what);

// "1.5 GiB", "512.0 MiB", "800 B".
std::string format_bytes(double bytes);

// Checks a planned allocation before it is made: throws InputError when `bytes` exceed the
// memory budget, naming `what` (e.g. "model.output (lsh_sampled) LSH tables"), both sizes,
// the budget's source and `advice` (which config keys or data sizes to change).
void check_memory_plan(double bytes, std::string_view what, std::string_view advice);

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // seconds(), then reset(): the time of one phase of a sequence timed with one watch.
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace xmc
