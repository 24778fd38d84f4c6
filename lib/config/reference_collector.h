#pragma once
// ReferenceCollector: the visitor that lists every key of a config struct with its type,
// default, allowed values and description, for the generated Markdown reference.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/node_writer.h"
#include "core/field_constraints.h"

namespace xmc {

struct OutputSpec;
struct OutputTypeInfo;

struct ReferenceRow {
  std::string section;  // top-level section ("" = top level), groups the tables
  std::string path;     // "train.batch_size", "model.encoder[].out"
  std::string type;     // bool, int, uint64, float, string, path, list, section
  std::string default_value;
  std::string allowed;  // "[1, 100000]", "cpu|cuda|auto", ...
  std::string doc;
};

class ReferenceCollector {
 public:
  // prefix: dotted path of the struct being described ("" = root).
  ReferenceCollector(std::string prefix, std::string section,
                     const std::vector<OutputTypeInfo>* types = nullptr);

  void field(std::string_view key, bool v, std::string_view doc);
  void field(std::string_view key, int64_t v, std::string_view doc, Range r = {});
  void field(std::string_view key, uint64_t v, std::string_view doc, Range r = {});
  void field(std::string_view key, double v, std::string_view doc, Range r = {});
  void field(std::string_view key, const std::string& v, std::string_view doc);
  void field(std::string_view key, const std::string& v, std::string_view doc, const Choices& c);
  void field(std::string_view key, const std::string& v, std::string_view doc, PathField);
  void field(std::string_view key, const OutputSpec& v, std::string_view doc);
  template <NamedEnum E>
  void field(std::string_view key, E v, std::string_view doc, const Choices& c = Choices::of<E>()) {
    field(key, std::string(to_string(v)), doc, c);
  }

  template <VisitableBy<ReferenceCollector> S>
  void field(std::string_view key, const S& s, std::string_view /*doc*/) {
    S copy = s;
    ReferenceCollector sub(path(key), prefix_.empty() ? std::string(key) : section_, types_);
    copy.visit(sub);
    append(std::move(sub));
  }

  template <VisitableBy<ReferenceCollector> S>
  void field(std::string_view key, const std::vector<S>& v, std::string_view doc) {
    std::string def = v.empty() ? "[]" : std::to_string(v.size()) + " items";
    add(key, "list", def, "", doc);
    S elem{};
    ReferenceCollector sub(path(key) + "[]", section_, types_);
    elem.visit(sub);
    append(std::move(sub));
  }

  std::vector<ReferenceRow> rows;

 private:
  std::string path(std::string_view key) const;
  void add(std::string_view key, std::string type, std::string def, std::string allowed,
           std::string_view doc);
  void append(ReferenceCollector&& sub);

  std::string prefix_, section_;
  const std::vector<OutputTypeInfo>* types_;
};

}  // namespace xmc
