// xmctrain report RUN_DIR...: one table over many training runs (a sweep), read from their
// run directories only.
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "report/report_table.h"
#include "report/run_directory.h"

namespace xmc::app {
namespace {

// The --help footer: every column, from the same table the report is built from.
std::string columns_help() {
  std::string out = "Columns:\n";
  for (const auto& c : report_column_reference()) {
    if (c.help.empty()) continue;  // P@3, P@5, ...: explained with P@1
    std::string name = c.name;
    if (name == "P@1") name = "P@1 P@3 P@5";
    if (name == "PSP@1") name = "PSP@1 PSP@3 PSP@5";
    out += fmt::format("  {:<18} {}\n", name, c.help);
  }
  out +=
      "Blank cells: the run directory lacks that field (an unfinished run, another version).\n"
      "Curves of the same runs: tools/plot_curves.py --out FILE.png RUN_DIR... (P@k against\n"
      "training time; same arguments). Sweeps: docs/sweeps.md.";
  return out;
}

}  // namespace

Command register_report(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "report",
      "Compare training runs: one row per run directory (as written by `xmctrain train`), "
      "with the config keys whose values differ between the runs as columns. RUN_DIR is a "
      "run directory, a directory holding run directories (searched one level down) or a "
      "glob pattern ('runs/sweep/*'). Runs that are unfinished or failed are listed as such "
      "with the reason. Only the run directories are read, so runs from other machines or "
      "older versions work; fields they lack are blank.");
  struct Opts {
    std::vector<std::string> dirs;
    std::string sort;
    bool md = false, csv = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("RUN_DIR", o->dirs, "Run directories, their parents, or glob patterns")
      ->required();
  sub->add_option("--sort", o->sort,
                  "Sort the rows by a column (e.g. P@1, total_s, optim.output.lr): metrics "
                  "best first, other columns smallest first, blanks last; default: the order "
                  "of the arguments");
  auto* md = sub->add_flag("--md", o->md, "Markdown table (the default)");
  auto* csv = sub->add_flag("--csv", o->csv, "CSV with a header row, numbers in full precision");
  auto* json = sub->add_flag("--json", o->json,
                             "JSON {\"columns\": [...], \"runs\": [{column: value|null}]}, "
                             "numbers in full precision");
  md->excludes(csv)->excludes(json);
  csv->excludes(json);
  sub->footer(columns_help());

  return {sub, [o]() -> int {
            std::vector<RunRecord> runs;
            for (const auto& dir : find_run_directories(o->dirs))
              runs.push_back(read_run_directory(dir));
            Report rep = make_report(runs);
            if (!o->sort.empty()) sort_report(rep, o->sort);
            if (o->csv)
              std::cout << report_csv(rep);
            else if (o->json)
              std::cout << report_json(rep).dump(2) << "\n";
            else
              std::cout << report_markdown(rep);
            return 0;
          }};
}

}  // namespace xmc::app
