#include "config/node_writer.h"

#include <fmt/format.h>

#include "config/output_spec.h"

namespace xmc {

std::string scalar_text(bool v) { return v ? "true" : "false"; }
std::string scalar_text(int64_t v) { return fmt::format("{}", v); }
std::string scalar_text(uint64_t v) { return fmt::format("{}", v); }
std::string scalar_text(double v) {
  // Shortest text that reads back to the same double; keep a '.0' so it reads as a float.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void NodeWriter::add(std::string_view key, ConfigNode value, std::string_view doc) {
  value.doc = std::string(doc);
  node_.add(std::string(key), std::move(value));
}

void NodeWriter::field(std::string_view key, const OutputSpec& v, std::string_view doc) {
  ConfigNode section{.kind = ConfigNode::Kind::map};
  section.add("type", ConfigNode::make_scalar(v.type)).doc = "Output layer backend";
  for (const auto& item : v.fields.items) section.items.push_back(item);
  add(key, std::move(section), doc);
}

}  // namespace xmc
