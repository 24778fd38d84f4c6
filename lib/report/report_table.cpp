#include "report/report_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <ranges>

#include "core/error.h"

namespace xmc {
namespace {

using nlohmann::json;
using Getter = std::function<ReportCell(const RunRecord&)>;

struct FixedColumn {
  ReportColumn column;
  Getter get;
};

constexpr double kMiB = 1048576.0;
constexpr std::string_view kConfigKeys = "<config keys>";

// find() on a value that is not an object (null: a missing file) gives end().
ReportCell number(const json& object, const char* key, double scale = 1.0) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return {};
  return it->get<double>() / scale;
}

ReportCell text(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

ReportCell config_value(const RunRecord& r, std::string_view key) {
  const std::string* v = r.has_config ? find_value(r.config, key) : nullptr;
  if (v == nullptr) return {};
  return *v;
}

const json& last_epoch(const RunRecord& r) {
  static const json none;
  return r.epochs.empty() ? none : r.epochs.back();
}

// Metrics of the final evaluation, else of the last evaluated epoch.
const json& last_metrics(const RunRecord& r) {
  static const json none;
  auto found = r.results.find("metrics");
  if (found != r.results.end() && found->is_object() && !found->empty()) return *found;
  for (auto e = r.epochs.rbegin(); e != r.epochs.rend(); ++e) {
    auto it = e->find("metrics");
    if (it != e->end() && it->is_object() && !it->empty()) return *it;
  }
  return none;
}

// Results first, then the last metrics.jsonl record (an unfinished run).
ReportCell result_or_epoch(const RunRecord& r, const char* result_key, const char* epoch_key,
                           double scale = 1.0) {
  ReportCell c = number(r.results, result_key, scale);
  return std::holds_alternative<std::monostate>(c) ? number(last_epoch(r), epoch_key, scale) : c;
}

Getter metric(std::string name) {
  return [name](const RunRecord& r) { return number(last_metrics(r), name.c_str()); };
}

const std::vector<FixedColumn>& fixed_columns() {
  static const std::vector<FixedColumn> cols = {
      {{"run", ColumnKind::text, "the run directory"},
       [](const RunRecord& r) -> ReportCell { return r.dir; }},
      {{"status", ColumnKind::text,
        "complete (results.json written), running (a train command holds it), incomplete "
        "(killed or interrupted), "
        "failed (stopped on an error, see reason) or unreadable (a run file does not parse)"},
       [](const RunRecord& r) -> ReportCell { return std::string(to_string(r.status)); }},
      {{"backend", ColumnKind::text, "output-layer backend (model.output.type)"},
       [](const RunRecord& r) {
         ReportCell c = text(r.results, "backend");
         return std::holds_alternative<std::monostate>(c) ? config_value(r, "model.output.type")
                                                          : c;
       }},
      {{"device", ColumnKind::text, "device the run trained on (cpu or cuda; finished runs)"},
       [](const RunRecord& r) { return text(r.results, "device"); }},
      {{std::string(kConfigKeys), ColumnKind::text,
        "one column per config key whose value differs between the runs, named as --set "
        "names it (from each config.resolved.yaml)"},
       nullptr},
      {{"P@1", ColumnKind::metric,
        "precision at 1, 3, 5 on the test set: the final evaluation, or for an unfinished "
        "run the last evaluated epoch"},
       metric("P@1")},
      {{"P@3", ColumnKind::metric, ""}, metric("P@3")},
      {{"P@5", ColumnKind::metric, ""}, metric("P@5")},
      {{"PSP@1", ColumnKind::metric, "propensity-scored precision at 1, 3, 5 (same source)"},
       metric("PSP@1")},
      {{"PSP@3", ColumnKind::metric, ""}, metric("PSP@3")},
      {{"PSP@5", ColumnKind::metric, ""}, metric("PSP@5")},
      {{"output_MiB", ColumnKind::quantity,
        "memory of the output layer in the memory ledger (parameters, optimizer state, "
        "indices; MiB; finished runs)"},
       [](const RunRecord& r) { return number(r.results, "output_layer_bytes", kMiB); }},
      {{"peak_rss_MiB", ColumnKind::quantity,
        "peak resident memory of the process (MiB; at the end, or at the last epoch)"},
       [](const RunRecord& r) {
         return result_or_epoch(r, "peak_rss_bytes", "peak_rss_bytes", kMiB);
       }},
      {{"epoch_s", ColumnKind::quantity,
        "training time of the last epoch in seconds (evaluation excluded)"},
       [](const RunRecord& r) {
         return result_or_epoch(r, "last_epoch_seconds", "epoch_seconds");
       }},
      {{"total_s", ColumnKind::quantity,
        "wall time of the whole run in seconds: loading, training, evaluation (finished runs)"},
       [](const RunRecord& r) { return number(r.results, "total_seconds"); }},
      {{"epochs", ColumnKind::count, "epochs done (records in metrics.jsonl)"},
       [](const RunRecord& r) -> ReportCell {
         if (!r.epochs.empty()) return static_cast<int64_t>(r.epochs.size());
         if (r.results.contains("epochs") && r.results["epochs"].is_number_integer())
           return r.results["epochs"].get<int64_t>();
         return int64_t{0};
       }},
      {{"reason", ColumnKind::text,
        "why the run is not complete, and lines of its files that could not be read"},
       [](const RunRecord& r) { return r.reason.empty() ? ReportCell() : ReportCell(r.reason); }},
  };
  return cols;
}

std::optional<double> as_number(const std::string& s) {
  double v = 0.0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// a before b in ascending order (blanks are handled by the caller).
bool ascending(const ReportCell& a, const ReportCell& b) {
  if (a.index() != b.index()) return a.index() < b.index();
  if (const auto* sa = std::get_if<std::string>(&a)) {
    const auto& sb = std::get<std::string>(b);
    auto na = as_number(*sa), nb = as_number(sb);
    if (na && nb) return *na < *nb;
    if (na.has_value() != nb.has_value()) return na.has_value();  // numbers before words
    return *sa < sb;
  }
  if (const auto* da = std::get_if<double>(&a)) return *da < std::get<double>(b);
  return std::get<int64_t>(a) < std::get<int64_t>(b);
}

bool is_blank(const ReportCell& c) { return std::holds_alternative<std::monostate>(c); }

bool is_numeric(ColumnKind k) { return k != ColumnKind::text; }

std::string plain(const ReportCell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  if (const auto* d = std::get_if<double>(&c)) return fmt::format("{}", *d);
  if (const auto* i = std::get_if<int64_t>(&c)) return fmt::format("{}", *i);
  return {};
}

std::string rounded(const ReportCell& c, ColumnKind kind) {
  if (const auto* d = std::get_if<double>(&c))
    return kind == ColumnKind::metric ? fmt::format("{:.4f}", *d) : fmt::format("{:.2f}", *d);
  return plain(c);
}

// As the config reference's cells: '|' separates cells and '<' would start an HTML tag
// (a config value such as "<none>" would vanish from the rendered table); a newline would
// end the row.
std::string markdown_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|' || ch == '<') out += '\\';
    out += ch == '\n' ? ' ' : ch;
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

size_t Report::column(std::string_view name) const {
  for (size_t j = 0; j < columns.size(); ++j)
    if (columns[j].name == name) return j;
  throw_input("report: no column '{}'; the columns are: {}", name,
              fmt::join(columns | std::views::transform(&ReportColumn::name), ", "));
}

std::vector<ReportColumn> report_column_reference() {
  std::vector<ReportColumn> out;
  for (const auto& f : fixed_columns()) out.push_back(f.column);
  return out;
}

Report make_report(const std::vector<RunRecord>& runs) {
  std::vector<const FlatConfig*> configs;
  for (const auto& r : runs)
    if (r.has_config) configs.push_back(&r.config);
  const std::vector<std::string> keys = differing_keys(configs);

  Report rep;
  rep.config_columns = keys.size();
  std::vector<Getter> getters;
  for (const auto& f : fixed_columns()) {
    if (f.column.name == kConfigKeys) {
      for (const auto& key : keys) {
        rep.columns.push_back({key, ColumnKind::text, "config key"});
        getters.emplace_back([key](const RunRecord& r) { return config_value(r, key); });
      }
      continue;
    }
    rep.columns.push_back(f.column);
    getters.push_back(f.get);
  }
  for (const auto& r : runs) {
    std::vector<ReportCell> row;
    row.reserve(getters.size());
    for (const auto& g : getters) row.push_back(g(r));
    rep.rows.push_back(std::move(row));
  }
  return rep;
}

void sort_report(Report& report, std::string_view column) {
  const size_t j = report.column(column);
  const bool largest_first = report.columns[j].kind == ColumnKind::metric;
  std::stable_sort(report.rows.begin(), report.rows.end(),
                   [&](const std::vector<ReportCell>& a, const std::vector<ReportCell>& b) {
                     const ReportCell &x = a[j], &y = b[j];
                     if (is_blank(x) || is_blank(y)) return !is_blank(x) && is_blank(y);
                     return largest_first ? ascending(y, x) : ascending(x, y);
                   });
}

// Cells are appended piece by piece: GCC 12 reports a false -Wrestrict overlap for
// `"literal" + std::string&&`.
std::string report_markdown(const Report& report) {
  std::string out = "|";
  std::string rule = "|";
  for (const auto& c : report.columns) {
    out.append(" ").append(markdown_escape(c.name)).append(" |");
    rule += is_numeric(c.kind) ? "---:|" : "---|";
  }
  out.append("\n").append(rule).append("\n");
  for (const auto& row : report.rows) {
    out += "|";
    for (size_t j = 0; j < row.size(); ++j)
      out.append(" ").append(markdown_escape(rounded(row[j], report.columns[j].kind))).append(" |");
    out += "\n";
  }
  return out;
}

std::string report_csv(const Report& report) {
  auto header =
      report.columns | std::views::transform([](const auto& c) { return csv_field(c.name); });
  std::string out = fmt::format("{}\n", fmt::join(header, ","));
  for (const auto& row : report.rows) {
    auto fields = row | std::views::transform([](const auto& c) { return csv_field(plain(c)); });
    out += fmt::format("{}\n", fmt::join(fields, ","));
  }
  return out;
}

nlohmann::json report_json(const Report& report) {
  json cols = json::array();
  for (const auto& c : report.columns) cols.push_back(c.name);
  json runs = json::array();
  for (const auto& row : report.rows) {
    json o = json::object();
    for (size_t j = 0; j < row.size(); ++j) {
      const std::string& name = report.columns[j].name;
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>)
              o[name] = nullptr;
            else
              o[name] = v;
          },
          row[j]);
    }
    runs.push_back(std::move(o));
  }
  return {{"columns", std::move(cols)}, {"runs", std::move(runs)}};
}

}  // namespace xmc
