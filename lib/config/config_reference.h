#pragma once
// The config reference, generated from the structs' visit() lists and the registered
// output types: one Markdown table per section (key path, type, default, allowed values,
// description). docs/config-reference.md is this text for the registry's types
// (regenerate: build/app/xmctrain train --config-reference > docs/config-reference.md).
#include <string>
#include <vector>

#include "config/output_types.h"

namespace xmc {

std::string config_reference_markdown(const std::vector<OutputTypeInfo>& output_types);

}  // namespace xmc
