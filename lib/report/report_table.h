#pragma once
// The table of `xmctrain report`: one row per run directory, the fixed columns (status,
// backend, device, P@1/3/5, PSP@1/3/5, memory, times, epochs, reason) with the config keys
// that differ between the runs inserted after `device`; as Markdown, CSV or JSON.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "report/run_directory.h"

namespace xmc {

enum class ColumnKind {
  text,      // strings (config values as written in config.resolved.yaml)
  metric,    // fractions in [0, 1]; sorted best (largest) first
  quantity,  // MiB or seconds; sorted smallest first
  count,     // integers
};

struct ReportColumn {
  std::string name;
  ColumnKind kind = ColumnKind::text;
  std::string help;  // one line for --help
};

// A blank cell is a value the run directory does not have.
using ReportCell = std::variant<std::monostate, std::string, double, int64_t>;

struct Report {
  std::vector<ReportColumn> columns;
  std::vector<std::vector<ReportCell>> rows;  // rows[i][j]: run i, column j
  size_t config_columns = 0;                  // how many config-key columns there are

  // Index of a column by name; InputError listing the columns when there is none.
  size_t column(std::string_view name) const;
};

// The fixed columns in table order, with the place config columns go marked by a column
// named "<config keys>" (for --help).
std::vector<ReportColumn> report_column_reference();

// Rows in the order of `runs`. Config columns: the keys whose values differ between the
// runs that have a config.resolved.yaml.
Report make_report(const std::vector<RunRecord>& runs);

// Stable sort by a column: metrics largest first, everything else smallest first (config
// values numerically when both are numbers), blank cells last. InputError for an unknown
// column.
void sort_report(Report& report, std::string_view column);

// Markdown table (numbers rounded for reading: metrics 4 decimals, MiB and seconds 2).
std::string report_markdown(const Report& report);
// CSV with a header row (RFC 4180 quoting); numbers in full precision; blanks empty.
std::string report_csv(const Report& report);
// {"columns": [names], "runs": [{column: value or null}]}; numbers in full precision.
nlohmann::json report_json(const Report& report);

}  // namespace xmc
