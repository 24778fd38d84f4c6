#include "core/resources.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"

namespace xmc {
namespace {
int64_t read_status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k(key);
  while (std::getline(in, line)) {
    if (line.compare(0, k.size(), k) == 0) return std::stoll(line.substr(k.size())) * 1024;
  }
  return 0;
}

int64_t parse_memory_limit(const std::string& text) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix.size() == 1 || (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b'))) {
    const std::string units = "KMGT";
    const size_t u = units.find(static_cast<char>(std::toupper(suffix[0])));
    if (u != std::string::npos) {
      scale = std::pow(1024.0, static_cast<double>(u + 1));
      suffix.clear();
    }
  }
  if (used == 0 || !suffix.empty() || !(v >= 0) || !std::isfinite(v * scale))
    throw_input(
        "environment variable XMC_MEMORY_LIMIT='{}': expected a size in bytes, "
        "optionally with a K, M, G or T suffix (e.g. 8G)",
        text);
  return static_cast<int64_t>(v * scale);
}

}  // namespace

MemoryBudget memory_budget() {
  if (const char* env = std::getenv("XMC_MEMORY_LIMIT"); env && *env)
    return {parse_memory_limit(env), "XMC_MEMORY_LIMIT"};
  std::ifstream in("/proc/meminfo");
  std::string line;
  const std::string key = "MemAvailable:";
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0)
      return {std::stoll(line.substr(key.size())) * 1024, "MemAvailable"};
  return {};
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

void check_memory_plan(double bytes, std::string_view what, std::string_view advice) {
  const MemoryBudget budget = memory_budget();
  if (budget.bytes < 0 || bytes <= static_cast<double>(budget.bytes)) return;
  throw_input("{} would need {} of memory, more than the {} available ({}{}): {}", what,
              format_bytes(bytes), format_bytes(static_cast<double>(budget.bytes)), budget.source,
              budget.source == "MemAvailable" ? " in /proc/meminfo" : "", advice);
}

int64_t peak_rss_bytes() { return read_status_kb("VmHWM:"); }

}  // namespace xmc
