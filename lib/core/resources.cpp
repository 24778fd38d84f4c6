#include "core/resources.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "core/error.h"

namespace xmc {
namespace {
// The value of the line starting with `key` of a /proc file (in kB), in bytes; none when
// the file has no such line.
std::optional<int64_t> proc_bytes(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(key)) return std::stoll(line.substr(key.size())) * 1024;
  return std::nullopt;
}

}  // namespace

int64_t parse_byte_size(const std::string& text, std::string_view what) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix.size() == 1 || (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) ||
      (suffix.size() == 3 && suffix[1] == 'i' && suffix[2] == 'B')) {
    const std::string units = "KMGT";
    const size_t u = units.find(static_cast<char>(std::toupper(suffix[0])));
    if (u != std::string::npos) {
      scale = std::pow(1024.0, static_cast<double>(u + 1));
      suffix.clear();
    }
  }
  if (used == 0 || !suffix.empty() || !(v >= 0) || !std::isfinite(v * scale))
    throw_input(
        "{}='{}': expected a size in bytes, optionally with a K, M, G or T suffix "
        "(powers of 1024; e.g. 8G, 8GB or 8GiB)",
        what, text);
  return static_cast<int64_t>(v * scale);
}

namespace {}  // namespace

MemoryBudget memory_budget() {
  if (const char* env = std::getenv("XMC_MEMORY_LIMIT"); env && *env)
    return {parse_byte_size(env, "environment variable XMC_MEMORY_LIMIT"), "XMC_MEMORY_LIMIT"};
  if (const auto avail = proc_bytes("/proc/meminfo", "MemAvailable:"))
    return {*avail, "MemAvailable"};
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

int64_t peak_rss_bytes() { return proc_bytes("/proc/self/status", "VmHWM:").value_or(0); }

}  // namespace xmc
