#include "config/output_types.h"

#include <fmt/format.h>

#include <algorithm>

namespace xmc {

const OutputTypeInfo& find_output_type(const std::vector<OutputTypeInfo>& types,
                                       const std::string& name) {
  auto it = std::find_if(types.begin(), types.end(),
                         [&](const OutputTypeInfo& t) { return t.name == name; });
  if (it != types.end()) return *it;
  std::vector<std::string> names;
  for (const auto& t : types) names.push_back(t.name);
  std::string best = closest_key(name, names);
  throw_input(
      "unknown output type '{}'{} (known: {})", name,
      best.empty() ? std::string{} : fmt::format(", did you mean '{}'?", best),
      names.empty() ? std::string("none registered") : fmt::format("{}", fmt::join(names, ", ")));
}

}  // namespace xmc
