// docs/sweeps.md's commands, run as written: every ```sh block of the doc is marked
// <!-- test: NAME --> and run here with bash, on a tiny synthetic config, with the built
// xmctrain first on the PATH and the checkout's tools/ beside the runs.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// NAME -> block text, for every ```sh block preceded by <!-- test: NAME -->. Fails when a
// ```sh block is not marked (it would go untested).
std::map<std::string, std::string> marked_blocks(const std::string& doc) {
  std::map<std::string, std::string> blocks;
  std::istringstream in(doc);
  std::string line, pending;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string marker = "<!-- test: ";
    if (line.rfind(marker, 0) == 0) {
      pending = line.substr(marker.size(), line.find(" -->") - marker.size());
      continue;
    }
    if (line == "```sh") {
      INFO("docs/sweeps.md:" << line_no << ": a ```sh block without <!-- test: NAME -->");
      REQUIRE_FALSE(pending.empty());
      std::string text;
      while (std::getline(in, line) && line != "```") text += line + "\n";
      REQUIRE(blocks.count(pending) == 0);
      blocks[pending] = text;
    }
    if (!line.empty()) pending.clear();
  }
  return blocks;
}

struct Shell {
  int exit_code;
  std::string out;
};

// Runs the setup block and then `block` in one bash, in `cwd`, with CONFIG and SWEEP set.
Shell run_block(const TempDir& tmp, const std::string& setup, const std::string& block,
                const std::string& sweep) {
  write_file(tmp / "block.sh", "set -e\n" + setup + block);
  const std::string bin_dir = fs::path(XMC_BINARY).parent_path().string();
  const std::string cmd = "cd '" + tmp.path().string() + "' && PATH='" + bin_dir +
                          "':\"$PATH\" CONFIG='" + (tmp / "tiny.yaml").string() + "' SWEEP='" +
                          sweep + "' bash block.sh > block.out 2> block.err";
  const int status = std::system(cmd.c_str());
  Shell s{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(tmp / "block.out")};
  if (s.exit_code != 0) s.out += "\nstderr:\n" + read_file(tmp / "block.err");
  return s;
}

json report_json(const TempDir& tmp, const std::string& sweep) {
  auto r = run_cli({"report", (tmp / sweep).string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE(
    "docs/sweeps.md: the sweep, its parallel form, resuming, report and plot run as written") {
  const auto blocks = marked_blocks(read_file(fs::path(XMC_SOURCE_DIR) / "docs" / "sweeps.md"));
  for (auto name : {"setup", "loop", "parallel", "resume", "report", "plot"})
    REQUIRE(blocks.count(name) == 1);
  REQUIRE(blocks.size() == 6);
  const std::string& setup = blocks.at("setup");

  TempDir tmp;
  write_file(tmp / "tiny.yaml", small_train_config(tmp / "data", 2));
  fs::create_directory_symlink(fs::path(XMC_SOURCE_DIR) / "tools", tmp / "tools");

  // The loop: four runs, the two swept keys as the report's only config columns.
  Shell loop = run_block(tmp, setup, blocks.at("loop"), "loop");
  INFO(loop.out);
  REQUIRE(loop.exit_code == 0);
  json before = report_json(tmp, "loop");
  REQUIRE(before["runs"].size() == 4);
  std::vector<std::string> config_cols;
  for (const auto& c : before["columns"])
    if (c.get<std::string>().find('.') != std::string::npos) config_cols.push_back(c);
  CHECK(config_cols == std::vector<std::string>{"optim.output.lr", "train.batch_size"});
  for (const auto& r : before["runs"]) CHECK(r["status"] == "complete");

  // The parallel form: the same four settings, each with threads set and its own log.
  Shell par = run_block(tmp, setup, blocks.at("parallel"), "par");
  INFO(par.out);
  REQUIRE(par.exit_code == 0);
  json pj = report_json(tmp, "par");
  REQUIRE(pj["runs"].size() == 4);
  for (const auto& r : pj["runs"]) CHECK(r["status"] == "complete");
  CHECK(fs::exists(tmp / "par" / "lr0.02-bs256" / "train.log"));
  CHECK(read_file(tmp / "par" / "lr0.02-bs256" / "config.resolved.yaml").find("threads: 1") !=
        std::string::npos);

  // Interrupt two runs of the loop's sweep: one after its first checkpoint (as if killed
  // there), one before any checkpoint (only its config written).
  const fs::path halted = tmp / "loop" / "lr0.02-bs256";
  auto h = run_cli({"train", (halted / "config.resolved.yaml").string(), "--out", halted.string(),
                    "--overwrite", "--halt-after-epoch", "1"});
  INFO(h.err);
  REQUIRE(h.exit_code == 0);
  const fs::path early = tmp / "loop" / "lr0.01-bs128";
  for (auto f : {"results.json", "metrics.jsonl", "checkpoint.h5"}) fs::remove(early / f);
  json mid = report_json(tmp, "loop");
  CHECK(mid["runs"][0]["status"] == "incomplete");  // lr0.01-bs128
  CHECK(mid["runs"][3]["status"] == "incomplete");  // lr0.02-bs256
  CHECK(mid["runs"][3]["epochs"] == 1);

  // Resume: both finish; the halted one with the metrics it had uninterrupted.
  Shell res = run_block(tmp, setup, blocks.at("resume"), "loop");
  INFO(res.out);
  REQUIRE(res.exit_code == 0);
  json after = report_json(tmp, "loop");
  REQUIRE(after["runs"].size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO(after["runs"][i]["run"]);
    CHECK(after["runs"][i]["status"] == "complete");
    CHECK(after["runs"][i]["epochs"] == 2);
  }
  CHECK(after["runs"][3]["P@1"].get<double>() == before["runs"][3]["P@1"].get<double>());
  CHECK(after["runs"][3]["PSP@5"].get<double>() == before["runs"][3]["PSP@5"].get<double>());

  // The report block: Markdown sorted by P@1, and a CSV beside the sweep.
  Shell rep = run_block(tmp, setup, blocks.at("report"), "loop");
  INFO(rep.out);
  REQUIRE(rep.exit_code == 0);
  CHECK(rep.out.rfind("| run | status | backend | device | optim.output.lr | train.batch_size |",
                      0) == 0);
  CHECK(std::count(rep.out.begin(), rep.out.end(), '\n') == 6);
  CHECK(read_file(tmp / "loop.csv").rfind("run,status,", 0) == 0);

  // The plot block: a PNG with one curve per run.
  Shell plot = run_block(tmp, setup, blocks.at("plot"), "loop");
  INFO(plot.out);
  REQUIRE(plot.exit_code == 0);
  const std::string png = read_file(tmp / "loop.png");
  REQUIRE(png.size() > 1000);
  CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  for (auto run : {"lr0.01-bs128", "lr0.01-bs256", "lr0.02-bs128", "lr0.02-bs256"})
    CHECK(plot.out.find("| " + std::string(run) + " | 2 |") != std::string::npos);
}
