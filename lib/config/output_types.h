#pragma once
// Registered output types: how the config module reads, dumps and documents the
// model.output section of each backend without knowing the backends. The registry
// (lib/layers/registry.cpp) adds one line per backend:
//
//   make_output_type<DenseConfig>("dense", "Full one-vs-all layer W[L×d]"),
//
// where DenseConfig is a struct with defaults and a visit() listing its fields (see
// experiment_config.h for the pattern).
#include <functional>
#include <string>
#include <vector>

#include "config/config_node.h"
#include "config/node_reader.h"
#include "config/node_writer.h"
#include "config/output_spec.h"
#include "config/reference_collector.h"

namespace xmc {

struct OutputTypeInfo {
  std::string name;
  std::string description;
  // Reads the section's fields (every key except "type") into the type's config struct,
  // stored in out.config (its dump in out.fields); path is "model.output" for messages.
  std::function<void(const ConfigNode& node, const std::string& path, OutputSpec& out)> parse;
  // Documents the type's fields (defaults from a default-constructed struct); prefix is
  // "model.output".
  std::function<std::vector<ReferenceRow>(const std::string& prefix)> reference;
};

template <class T>
OutputTypeInfo make_output_type(std::string name, std::string description) {
  OutputTypeInfo info;
  info.name = std::move(name);
  info.description = std::move(description);
  info.parse = [](const ConfigNode& node, const std::string& path, OutputSpec& out) {
    T value{};
    NodeReader r(node, path);
    r.allow_key("type");
    value.visit(r);
    r.finish();
    out.fields = NodeWriter::write(value);
    out.config = std::move(value);
  };
  info.reference = [](const std::string& prefix) {
    T value{};
    ReferenceCollector c(prefix, "");
    value.visit(c);
    return std::move(c.rows);
  };
  return info;
}

// The type named `name`; throws InputError listing the known names (and the closest one).
const OutputTypeInfo& find_output_type(const std::vector<OutputTypeInfo>& types,
                                       const std::string& name);

}  // namespace xmc
