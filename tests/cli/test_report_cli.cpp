// End-to-end: xmctrain report over real run directories — three finished runs that differ in
// two config keys, a run halted after its first checkpoint and a run killed before it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/test_support.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// RFC 4180 records (quoted fields may hold commas, quotes and newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += text[++i];
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

void train(const fs::path& config, const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", config.string(), "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("report: three runs differing in two keys, a halted and a killed run") {
  TempDir tmp;
  const fs::path cfg = tmp / "c.yaml";
  write_file(cfg, small_train_config(tmp / "data", 2));
  const std::string lr1 = "optim.output.lr=0.01", lr2 = "optim.output.lr=0.02";
  const std::string bs1 = "train.batch_size=128", bs2 = "train.batch_size=256";
  train(cfg, tmp / "runs" / "a", {"--set", lr1, "--set", bs1});
  train(cfg, tmp / "runs" / "b", {"--set", lr2, "--set", bs1});
  train(cfg, tmp / "runs" / "c", {"--set", lr1, "--set", bs2});

  // Requested order: the order of the arguments.
  const std::string a = (tmp / "runs" / "a").string(), b = (tmp / "runs" / "b").string(),
                    c = (tmp / "runs" / "c").string();
  auto r = run_cli({"report", c, a, b, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  std::vector<std::string> config_cols;
  for (const auto& name : j["columns"]) {
    const std::string n = name.get<std::string>();
    if (n.find('.') != std::string::npos) config_cols.push_back(n);
  }
  CHECK(config_cols == std::vector<std::string>{"optim.output.lr", "train.batch_size"});
  REQUIRE(j["runs"].size() == 3);
  CHECK(j["runs"][0]["run"] == c);
  CHECK(j["runs"][1]["run"] == a);
  CHECK(j["runs"][2]["run"] == b);
  CHECK(j["runs"][0]["train.batch_size"] == "256");
  CHECK(j["runs"][2]["optim.output.lr"] == "0.02");
  for (const auto& run : j["runs"]) {
    CHECK(run["status"] == "complete");
    CHECK(run["backend"] == "dense");
    CHECK(run["device"] == "cpu");
    CHECK(run["epochs"] == 2);
    CHECK(run["reason"].is_null());
    for (auto col : {"P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "output_MiB", "peak_rss_MiB",
                     "epoch_s", "total_s"})
      CHECK(run[col].is_number());
  }
  // The numbers are results.json's.
  const json res_a = json::parse(read_file(tmp / "runs" / "a" / "results.json"));
  CHECK(j["runs"][1]["P@1"].get<double>() == res_a["metrics"]["P@1"].get<double>());
  CHECK(j["runs"][1]["total_s"].get<double>() == res_a["total_seconds"].get<double>());

  // --sort P@1: best first.
  auto s = run_cli({"report", a, b, c, "--sort", "P@1", "--json"});
  REQUIRE(s.exit_code == 0);
  const json js = json::parse(s.out);
  for (size_t i = 1; i < 3; ++i)
    CHECK(js["runs"][i - 1]["P@1"].get<double>() >= js["runs"][i]["P@1"].get<double>());

  // A run halted after its first checkpoint (as if killed there) and one killed with SIGKILL
  // before any epoch ended; the parent directory is searched one level down.
  train(cfg, tmp / "runs" / "halted",
        {"--set", lr1, "--set", bs2, "--set", "train.epochs=3", "--halt-after-epoch", "1"});
  const fs::path killed = tmp / "runs" / "killed";
  {
    const std::string conf = cfg.string(), out = killed.string();
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      freopen("/dev/null", "w", stdout);
      freopen("/dev/null", "w", stderr);
      execl(XMC_BINARY, XMC_BINARY, "train", conf.c_str(), "--out", out.c_str(), "--set",
            "train.epochs=500", static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(killed / "config.resolved.yaml") &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));
  }

  auto all = run_cli({"report", (tmp / "runs").string(), "--json"});
  INFO(all.err);
  REQUIRE(all.exit_code == 0);
  const json ja = json::parse(all.out);
  REQUIRE(ja["runs"].size() == 5);  // a, b, c, halted, killed: name order
  const json& h = ja["runs"][3];
  CHECK(h["run"] == (tmp / "runs" / "halted").string());
  CHECK(h["status"] == "incomplete");
  CHECK(h["epochs"] == 1);
  CHECK(h["train.epochs"] == "3");
  CHECK(h["P@1"].is_number());  // from its evaluated epoch
  CHECK(h["total_s"].is_null());
  INFO(h["reason"]);
  CHECK(h["reason"].get<std::string>().find("1 of 3 epochs") != std::string::npos);
  CHECK(h["reason"].get<std::string>().find("--resume") != std::string::npos);
  const json& k = ja["runs"][4];
  CHECK(k["status"] == "incomplete");
  CHECK(k["train.epochs"] == "500");
  CHECK(k["reason"].get<std::string>().find("of 500 epochs") != std::string::npos);

  // --csv parses back to the same numbers and text as --json.
  auto csv = run_cli({"report", (tmp / "runs").string(), "--csv"});
  REQUIRE(csv.exit_code == 0);
  const auto rows = parse_csv(csv.out);
  REQUIRE(rows.size() == 6);
  const json& cols = ja["columns"];
  REQUIRE(rows[0].size() == cols.size());
  for (size_t i = 0; i < cols.size(); ++i) CHECK(rows[0][i] == cols[i].get<std::string>());
  for (size_t r_i = 0; r_i < 5; ++r_i) {
    REQUIRE(rows[r_i + 1].size() == cols.size());
    for (size_t c_i = 0; c_i < cols.size(); ++c_i) {
      const json& v = ja["runs"][r_i][cols[c_i].get<std::string>()];
      const std::string& f = rows[r_i + 1][c_i];
      INFO("row " << r_i << " column " << cols[c_i]);
      if (v.is_null())
        CHECK(f.empty());
      else if (v.is_number_integer())
        CHECK(std::stoll(f) == v.get<int64_t>());
      else if (v.is_number())
        CHECK(std::stod(f) == v.get<double>());
      else
        CHECK(f == v.get<std::string>());
    }
  }

  // Markdown (the default): a header, a rule and a row per run.
  auto md = run_cli({"report", (tmp / "runs").string()});
  REQUIRE(md.exit_code == 0);
  // Config columns in the order of the resolved config (train.epochs comes first there).
  CHECK(md.out.rfind("| run | status | backend | device | optim.output.lr | train.epochs | "
                     "train.batch_size | P@1 |",
                     0) == 0);
  CHECK(std::count(md.out.begin(), md.out.end(), '\n') == 7);
}

TEST_CASE("report: a failed run shows its error, and bad arguments exit 2") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  // An absurd learning rate: training begins, then diverges (exit 1, "training diverged").
  // A run that fails before training begins leaves no directory (docs/failure-behaviour.md).
  auto t = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "runs" / "f").string(),
                    "--set", "optim.output.lr=1e30", "--set", "optim.encoder.lr=1e30"});
  REQUIRE(t.exit_code == 1);
  REQUIRE(t.err.find("diverged") != std::string::npos);
  auto r = run_cli({"report", (tmp / "runs" / "*").string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["runs"].size() == 1);
  CHECK(j["runs"][0]["status"] == "failed");
  INFO(j["runs"][0]["reason"]);
  CHECK(t.err.find(j["runs"][0]["reason"].get<std::string>()) != std::string::npos);

  auto none = run_cli({"report", (tmp / "nothing").string()});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("nothing") != std::string::npos);
  auto bad_sort = run_cli({"report", (tmp / "runs").string(), "--sort", "P@7"});
  CHECK(bad_sort.exit_code == 2);
  CHECK(bad_sort.err.find("P@7") != std::string::npos);
  auto both = run_cli({"report", (tmp / "runs").string(), "--csv", "--json"});
  CHECK(both.exit_code == 2);

  // --help explains every column.
  auto h = run_cli({"report", "--help"});
  REQUIRE(h.exit_code == 0);
  for (auto col : {"run", "status", "backend", "device", "<config keys>", "P@1 P@3 P@5",
                   "PSP@1 PSP@3 PSP@5", "output_MiB", "peak_rss_MiB", "epoch_s", "total_s",
                   "epochs", "reason", "--sort", "--csv", "--json", "--md"})
    CHECK(h.out.find(col) != std::string::npos);
}
