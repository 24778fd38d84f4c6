#pragma once
// YAML text <-> ConfigNode. The only place that uses yaml-cpp (linked privately).
#include <string>
#include <string_view>

#include "config/config_node.h"

namespace xmc {

// Parses one YAML document. source names the text in origins and messages: a file path
// gives "path:line" origins; with fixed_origin = true every node gets `source` itself as
// origin (for --set values). A syntax error throws InputError "source:line:column: ...".
ConfigNode parse_yaml(std::string_view text, const std::string& source, bool fixed_origin = false);

// Block-style YAML; scalars carry their doc as a trailing comment.
std::string emit_yaml(const ConfigNode& node);

}  // namespace xmc
