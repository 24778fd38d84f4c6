#include "core/resources.h"

#include <fstream>
#include <string>

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
}  // namespace

int64_t peak_rss_bytes() { return read_status_kb("VmHWM:"); }
int64_t current_rss_bytes() { return read_status_kb("VmRSS:"); }

}  // namespace xmc
