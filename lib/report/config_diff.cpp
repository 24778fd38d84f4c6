#include "report/config_diff.h"

#include <unordered_set>

namespace xmc {

std::vector<std::string> differing_keys(const std::vector<const FlatConfig*>& configs) {
  std::vector<std::string> out;
  if (configs.size() < 2) return out;
  std::unordered_set<std::string> seen;
  for (const FlatConfig* c : configs) {
    for (const auto& [key, value] : *c) {
      if (!seen.insert(key).second) continue;
      for (const FlatConfig* other : configs) {
        const std::string* v = find_value(*other, key);
        if (v == nullptr || *v != value) {
          out.push_back(key);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace xmc
