#include "config/reference_collector.h"

#include <fmt/format.h>

#include "config/output_spec.h"
#include "config/output_types.h"

namespace xmc {

ReferenceCollector::ReferenceCollector(std::string prefix, std::string section,
                                       const std::vector<OutputTypeInfo>* types)
    : prefix_(std::move(prefix)), section_(std::move(section)), types_(types) {}

std::string ReferenceCollector::path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
}

void ReferenceCollector::add(std::string_view key, std::string type, std::string def,
                             std::string allowed, std::string_view doc) {
  rows.push_back(
      {section_, path(key), std::move(type), std::move(def), std::move(allowed), std::string(doc)});
}

void ReferenceCollector::append(ReferenceCollector&& sub) {
  for (auto& r : sub.rows) rows.push_back(std::move(r));
}

void ReferenceCollector::field(std::string_view key, bool v, std::string_view doc) {
  add(key, "bool", scalar_text(v), "", doc);
}
void ReferenceCollector::field(std::string_view key, int64_t v, std::string_view doc, Range r) {
  add(key, "int", scalar_text(v), r.str(true), doc);
}
void ReferenceCollector::field(std::string_view key, uint64_t v, std::string_view doc, Range r) {
  std::string allowed = r.str(true);
  add(key, "uint64", scalar_text(v), allowed.empty() ? ">= 0" : allowed, doc);
}
void ReferenceCollector::field(std::string_view key, double v, std::string_view doc, Range r) {
  add(key, "float", scalar_text(v), r.str(false), doc);
}
void ReferenceCollector::field(std::string_view key, const std::string& v, std::string_view doc) {
  add(key, "string", fmt::format("\"{}\"", v), "", doc);
}
void ReferenceCollector::field(std::string_view key, const std::string& v, std::string_view doc,
                               const Choices& c) {
  add(key, "string", v, c.str(), doc);
}
void ReferenceCollector::field(std::string_view key, const std::string& v, std::string_view doc,
                               PathField) {
  add(key, "path", v.empty() ? std::string("(unset)") : v, "", doc);
}

void ReferenceCollector::field(std::string_view key, const OutputSpec& v, std::string_view doc) {
  std::vector<std::string> names;
  if (types_)
    for (const auto& t : *types_) names.push_back(t.name);
  rows.push_back({section_, path(key) + ".type", "string", v.type,
                  fmt::format("{}", fmt::join(names, ", ")),
                  fmt::format("{}: the backend; its keys are listed per type below", doc)});
}

}  // namespace xmc
