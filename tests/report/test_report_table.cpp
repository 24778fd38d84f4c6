// The report table: columns, config-key columns, sorting, and the three output formats.
#include <catch2/catch.hpp>
#include <sstream>

#include "config/yaml_tree.h"
#include "io/expect_input_error.h"
#include "report/report_table.h"

using namespace xmc;
using nlohmann::json;

namespace {

RunRecord run(const std::string& dir, const char* config_yaml, json results,
              std::vector<json> epochs = {}) {
  RunRecord r;
  r.dir = dir;
  r.config = flatten_config(parse_yaml(config_yaml, dir));
  r.has_config = true;
  r.results = std::move(results);
  r.epochs = std::move(epochs);
  r.status = r.results.is_null() ? RunStatus::incomplete : RunStatus::complete;
  if (r.results.is_null()) r.reason = "no results.json";
  return r;
}

json finished(double p1, double rss_bytes) {
  return {{"backend", "dense"},
          {"device", "cpu"},
          {"metrics", {{"P@1", p1}, {"P@3", p1 / 2}, {"P@5", p1 / 3}, {"PSP@1", p1 / 4}}},
          {"output_layer_bytes", 3 * 1048576},
          {"peak_rss_bytes", rss_bytes},
          {"last_epoch_seconds", 0.25},
          {"total_seconds", 1.0 / 3.0}};
}

std::vector<std::string> column_names(const Report& r) {
  std::vector<std::string> out;
  for (const auto& c : r.columns) out.push_back(c.name);
  return out;
}

std::vector<std::string> run_order(const Report& r) {
  std::vector<std::string> out;
  for (const auto& row : r.rows) out.push_back(std::get<std::string>(row[0]));
  return out;
}

std::vector<RunRecord> three_runs() {
  return {run("a", "lr: 0.01\nbs: 128\nname: s\n", finished(0.5, 2e8)),
          run("b", "lr: 0.02\nbs: 128\nname: s\n", finished(0.7, 3e8)),
          run("c", "lr: 0.01\nbs: 256\nname: s\n", nullptr,
              {json{{"epoch", 1}, {"epoch_seconds", 0.5}, {"metrics", {{"P@1", 0.2}}}},
               json{{"epoch", 2}, {"epoch_seconds", 0.75}, {"peak_rss_bytes", 1048576}}})};
}

}  // namespace

TEST_CASE("the report has one row per run and a column per differing config key") {
  Report rep = make_report(three_runs());
  CHECK(rep.config_columns == 2);
  CHECK(column_names(rep) == std::vector<std::string>{"run", "status", "backend", "device", "lr",
                                                      "bs", "P@1", "P@3", "P@5", "PSP@1", "PSP@3",
                                                      "PSP@5", "output_MiB", "peak_rss_MiB",
                                                      "epoch_s", "total_s", "epochs", "reason"});
  REQUIRE(rep.rows.size() == 3);
  const auto& a = rep.rows[0];
  CHECK(std::get<std::string>(a[rep.column("lr")]) == "0.01");
  CHECK(std::get<double>(a[rep.column("P@1")]) == 0.5);
  CHECK(std::get<double>(a[rep.column("output_MiB")]) == 3.0);
  CHECK(std::holds_alternative<std::monostate>(a[rep.column("PSP@3")]));  // not in results
  CHECK(std::holds_alternative<std::monostate>(a[rep.column("reason")]));
  // The unfinished run: metrics of its last evaluated epoch, times of its last epoch, the
  // backend from its config when results.json is missing (here: none in either: blank).
  const auto& c = rep.rows[2];
  CHECK(std::get<std::string>(c[rep.column("status")]) == "incomplete");
  CHECK(std::get<double>(c[rep.column("P@1")]) == 0.2);
  CHECK(std::get<double>(c[rep.column("epoch_s")]) == 0.75);
  CHECK(std::get<double>(c[rep.column("peak_rss_MiB")]) == 1.0);
  CHECK(std::holds_alternative<std::monostate>(c[rep.column("total_s")]));
  CHECK(std::holds_alternative<std::monostate>(c[rep.column("backend")]));
  CHECK(std::get<int64_t>(c[rep.column("epochs")]) == 2);
  CHECK(std::get<std::string>(c[rep.column("reason")]) == "no results.json");
}

TEST_CASE("sorting: metrics best first, other columns smallest first, blanks last") {
  Report rep = make_report(three_runs());
  sort_report(rep, "P@1");
  CHECK(run_order(rep) == std::vector<std::string>{"b", "a", "c"});
  sort_report(rep, "total_s");  // c has none: last
  CHECK(run_order(rep) == std::vector<std::string>{"b", "a", "c"});
  sort_report(rep, "peak_rss_MiB");
  CHECK(run_order(rep) == std::vector<std::string>{"c", "a", "b"});
  sort_report(rep, "bs");  // numerically, stable
  CHECK(run_order(rep) == std::vector<std::string>{"a", "b", "c"});

  // Config values compare as numbers when they are numbers ("9" < "10").
  std::vector<RunRecord> runs = {run("x", "n: 10\n", nullptr), run("y", "n: 9\n", nullptr),
                                 run("z", "n: auto\n", nullptr)};
  Report r2 = make_report(runs);
  sort_report(r2, "n");
  CHECK(run_order(r2) == std::vector<std::string>{"y", "x", "z"});

  auto msg = xmc::test::input_error_message([&] { sort_report(rep, "P@2"); });
  CHECK(msg.find("'P@2'") != std::string::npos);
  CHECK(msg.find("PSP@5") != std::string::npos);  // lists the columns
}

TEST_CASE("CSV and JSON carry the same numbers in full precision, Markdown rounds") {
  Report rep = make_report(three_runs());
  const json j = report_json(rep);
  const std::string csv = report_csv(rep);

  // Parse the CSV back (no field here needs quoting except the reason).
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  CHECK(line ==
        "run,status,backend,device,lr,bs,P@1,P@3,P@5,PSP@1,PSP@3,PSP@5,output_MiB,"
        "peak_rss_MiB,epoch_s,total_s,epochs,reason");
  REQUIRE(j["runs"].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(std::getline(in, line));
    std::vector<std::string> fields;
    std::stringstream ss(line);
    std::string f;
    while (std::getline(ss, f, ',')) fields.push_back(f);
    if (line.back() == ',') fields.emplace_back();
    REQUIRE(fields.size() == rep.columns.size());
    for (size_t k = 0; k < fields.size(); ++k) {
      const json& v = j["runs"][i][rep.columns[k].name];
      INFO(rep.columns[k].name << " row " << i);
      if (v.is_null())
        CHECK(fields[k].empty());
      else if (v.is_number_float())
        CHECK(std::stod(fields[k]) == v.get<double>());
      else if (v.is_number_integer())
        CHECK(std::stoll(fields[k]) == v.get<int64_t>());
      else
        CHECK(fields[k] == v.get<std::string>());
    }
  }
  CHECK(j["runs"][0]["total_s"].get<double>() == 1.0 / 3.0);

  const std::string md = report_markdown(rep);
  CHECK(md.find("| run | status | backend | device | lr | bs | P@1 |") == 0);
  CHECK(md.find("| 0.5000 |") != std::string::npos);
  CHECK(md.find("| 0.33 |") != std::string::npos);  // total_s of a
  // One header, one rule, three rows.
  CHECK(std::count(md.begin(), md.end(), '\n') == 5);
}

TEST_CASE("text cells are quoted in CSV and escaped in Markdown") {
  std::vector<RunRecord> runs = {run("a,b", "k: '1|2'\n", nullptr), run("c\"d", "k: 3\n", nullptr),
                                 run("e", "k: '<none>'\n", nullptr)};
  Report rep = make_report(runs);
  const std::string csv = report_csv(rep);
  CHECK(csv.find("\n\"a,b\",incomplete,") != std::string::npos);
  CHECK(csv.find("\n\"c\"\"d\",incomplete,") != std::string::npos);
  CHECK(csv.find(",<none>") != std::string::npos);  // CSV keeps it as it is
  const std::string md = report_markdown(rep);
  CHECK(md.find("| 1\\|2 |") != std::string::npos);
  CHECK(md.find("| \\<none> |") != std::string::npos);  // not an HTML tag when rendered
}
