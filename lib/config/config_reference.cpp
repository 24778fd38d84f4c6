#include "config/config_reference.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/experiment_config.h"
#include "config/reference_collector.h"

namespace xmc {

namespace {

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|' || c == '<') out += '\\';  // table separator; '<' would start an HTML tag
    out += c;
  }
  return out;
}

std::string code(const std::string& s) { return s.empty() ? "" : fmt::format("`{}`", s); }

void table(std::string& md, const std::vector<ReferenceRow>& rows) {
  md += "| key | type | default | allowed | description |\n";
  md += "|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    std::string def = r.default_value == "(unset)" ? r.default_value : code(r.default_value);
    md += fmt::format("| {} | {} | {} | {} | {} |\n", code(r.path), r.type, cell(def),
                      cell(r.allowed), cell(r.doc));
  }
}

}  // namespace

std::string config_reference_markdown(const std::vector<OutputTypeInfo>& output_types) {
  ExperimentConfig defaults;
  ReferenceCollector collector("", "", &output_types);
  defaults.visit(collector);

  std::string md =
      "# xmctrain config reference\n\n"
      "Generated from the config structs (`lib/config/experiment_config.h`, with the encoder,\n"
      "optimizer, schedule and synth structs it uses from `lib/model/`, `lib/ops/` and\n"
      "`lib/data/`) and the output types registered in `lib/layers/registry.cpp`; do not edit by "
      "hand. Regenerate with\n"
      "`build/app/xmctrain train --config-reference > docs/config-reference.md` (a test checks it "
      "is current).\n\n"
      "Every key is optional and has the default shown. Unknown keys are errors. Any key can\n"
      "be overridden on the command line with `--set path=value` (the value is YAML:\n"
      "`--set train.epochs=3`, `--set model.encoder=[]`, `--set model.encoder[0].out=256`).\n"
      "List elements are shown as `key[]`. Paths are optional: empty = unset.\n";

  std::vector<std::string> sections;
  for (const auto& r : collector.rows)
    if (std::find(sections.begin(), sections.end(), r.section) == sections.end())
      sections.push_back(r.section);
  for (const auto& s : sections) {
    md += fmt::format("\n## {}\n\n", s.empty() ? std::string("Top level") : code(s));
    std::vector<ReferenceRow> rows;
    for (const auto& r : collector.rows)
      if (r.section == s) rows.push_back(r);
    table(md, rows);
  }

  md += "\n## Output types (`model.output`)\n\n";
  if (output_types.empty()) md += "No output types are registered.\n";
  for (const auto& t : output_types) {
    md += fmt::format("\n### `type: {}`\n\n{}\n\n", t.name, t.description);
    const std::vector<ReferenceRow> rows = t.reference("model.output");
    if (rows.empty())
      md += "No further keys.\n";
    else
      table(md, rows);
  }
  return md;
}

}  // namespace xmc
