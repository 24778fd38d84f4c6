#pragma once
// Which config keys differ between runs. Each resolved config is flattened to
// "key path -> value text", the key paths spelled as --set spells them
// ("optim.output.lr", "model.encoder[0].out"), so a report column names the override that
// reproduces it.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_node.h"

namespace xmc {

// Keys whose value is not the same in every config — a key that some configs lack differs —
// in order of first appearance. Fewer than two configs: none.
std::vector<std::string> differing_keys(const std::vector<const FlatConfig*>& configs);

}  // namespace xmc
