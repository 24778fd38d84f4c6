// Reading run directories written by train (or by older versions, or cut short), and
// finding them from command-line arguments.
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/error.h"
#include "io/expect_input_error.h"
#include "report/run_directory.h"
#include "train/run_files.h"
#include "support/test_support.h"

using namespace xmc;
using namespace xmc::test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = "name: r\ntrain:\n  epochs: 3  # epochs\n  batch_size: 128\n";

std::string epoch_line(int epoch, double p1, bool with_metrics = true) {
  std::string m = with_metrics ? fmt::format(", \"metrics\": {{\"P@1\": {}}}", p1) : "";
  return fmt::format("{{\"epoch\": {}, \"epoch_seconds\": 0.5, \"peak_rss_bytes\": 1048576{}}}\n",
                     epoch, m);
}

void make_run(const fs::path& dir, int epochs_done, bool finished) {
  fs::create_directories(dir);
  write_file(dir / "config.resolved.yaml", kConfig);
  std::string lines;
  for (int e = 1; e <= epochs_done; ++e) lines += epoch_line(e, 0.1 * e);
  write_file(dir / "metrics.jsonl", lines);
  if (epochs_done > 0) write_file(dir / "checkpoint.h5", "");
  if (finished)
    write_file(dir / "results.json",
               R"({"backend": "dense", "device": "cpu", "metrics": {"P@1": 0.3}})");
}

}  // namespace

TEST_CASE("a finished run reads as complete with its config, epochs and results") {
  TempDir tmp;
  make_run(tmp / "a", 3, true);
  RunRecord r = read_run_directory(tmp / "a");
  CHECK(r.status == RunStatus::complete);
  CHECK(r.reason.empty());
  CHECK(r.has_config);
  CHECK(r.planned_epochs == 3);
  CHECK(r.epochs.size() == 3);
  CHECK(r.results["backend"] == "dense");
  CHECK(r.has_checkpoint);
}

TEST_CASE("a config_change record of a resumed run is not counted as an epoch") {
  TempDir tmp;
  make_run(tmp / "c", 2, true);
  write_file(tmp / "c" / "metrics.jsonl",
             epoch_line(1, 0.1) + "{\"config_change\": {\"optim.output.lr\": [0.01, 0.02]}}\n" +
                 epoch_line(2, 0.2));
  RunRecord r = read_run_directory(tmp / "c");
  CHECK(r.reason.empty());
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[1]["epoch"] == 2);
}

TEST_CASE("a killed run reads as incomplete, saying how far it got and whether it can resume") {
  TempDir tmp;
  make_run(tmp / "k", 1, false);
  RunRecord r = read_run_directory(tmp / "k");
  CHECK(r.status == RunStatus::incomplete);
  CHECK(r.epochs.size() == 1);
  INFO(r.reason);
  CHECK(r.reason.find("1 of 3 epochs") != std::string::npos);
  CHECK(r.reason.find("--resume") != std::string::npos);

  // Killed before the first checkpoint, while appending a metrics line.
  fs::create_directories(tmp / "early");
  write_file(tmp / "early" / "config.resolved.yaml", kConfig);
  write_file(tmp / "early" / "metrics.jsonl", "{\"epoch\": 1, \"epo");
  RunRecord e = read_run_directory(tmp / "early");
  CHECK(e.status == RunStatus::incomplete);
  CHECK(e.epochs.empty());
  INFO(e.reason);
  CHECK(e.reason.find("0 of 3 epochs") != std::string::npos);
  CHECK(e.reason.find("no checkpoint") != std::string::npos);
  CHECK(e.reason.find("metrics.jsonl: line 1 is not a JSON object") != std::string::npos);
}

TEST_CASE("a failed run gives the error it stopped on, unparseable files make it unreadable") {
  TempDir tmp;
  make_run(tmp / "f", 0, false);
  write_file(tmp / "f" / "failed.txt", "data.train: cannot open 'x.npy'\nmore\n");
  RunRecord f = read_run_directory(tmp / "f");
  CHECK(f.status == RunStatus::failed);
  CHECK(f.reason == "data.train: cannot open 'x.npy'");

  make_run(tmp / "u", 3, false);
  write_file(tmp / "u" / "results.json", "{\"backend\": ");
  RunRecord u = read_run_directory(tmp / "u");
  CHECK(u.status == RunStatus::unreadable);
  CHECK(u.results.is_null());
  CHECK(u.reason.find("results.json") != std::string::npos);

  make_run(tmp / "y", 3, true);
  write_file(tmp / "y" / "config.resolved.yaml", "train: [1, 2\n");
  RunRecord y = read_run_directory(tmp / "y");
  CHECK(y.status == RunStatus::unreadable);
  CHECK_FALSE(y.has_config);
  CHECK(y.reason.find("config.resolved.yaml:") != std::string::npos);
}

TEST_CASE("a run from an older version without metrics.jsonl or config still reads") {
  TempDir tmp;
  fs::create_directories(tmp / "old");
  write_file(tmp / "old" / "results.json", R"({"metrics": {"P@1": 0.5}})");
  RunRecord r = read_run_directory(tmp / "old");
  CHECK(r.status == RunStatus::complete);
  CHECK_FALSE(r.has_config);
  CHECK(r.planned_epochs == 0);
  CHECK(r.epochs.empty());
}

TEST_CASE("run directories are found from directories, parents and globs, in order") {
  TempDir tmp;
  make_run(tmp / "sweep" / "b", 3, true);
  make_run(tmp / "sweep" / "a", 3, true);
  fs::create_directories(tmp / "sweep" / "data");  // not a run: skipped
  write_file(tmp / "sweep" / "curves.png", "");
  make_run(tmp / "other", 1, false);
  const std::string sweep = (tmp / "sweep").string();

  auto found = find_run_directories({sweep});
  CHECK(found == std::vector<fs::path>{tmp / "sweep" / "a", tmp / "sweep" / "b"});

  // Argument order first; the same directory twice is listed once.
  found = find_run_directories({(tmp / "other").string(), sweep, sweep + "/a"});
  CHECK(found == std::vector<fs::path>{tmp / "other", tmp / "sweep" / "a", tmp / "sweep" / "b"});

  // A glob: matches in name order; files and non-run directories skipped.
  found = find_run_directories({sweep + "/*"});
  CHECK(found == std::vector<fs::path>{tmp / "sweep" / "a", tmp / "sweep" / "b"});

  auto msg = input_error_message([&] { find_run_directories({(tmp / "none").string()}); });
  CHECK(msg.find("none") != std::string::npos);
  msg = input_error_message([&] { find_run_directories({sweep + "/z*"}); });
  CHECK(msg.find("z*") != std::string::npos);
  msg = input_error_message([&] { find_run_directories({(tmp / "sweep" / "data").string()}); });
  CHECK(msg.find("no run directory") != std::string::npos);
}

TEST_CASE("a run directory a train command holds reads as running, refuses a second train") {
  TempDir tmp;
  make_run(tmp / "r", 1, false);
  {
    RunDirectory live(tmp / "r", RunMode::resume);  // takes the lock, as train does
    CHECK(run_directory_in_use(tmp / "r"));
    RunRecord r = read_run_directory(tmp / "r");
    CHECK(r.status == RunStatus::running);
    INFO(r.reason);
    CHECK(r.reason.find("running in it: 1 of 3 epochs") != std::string::npos);
    CHECK_THAT(input_error_message([&] { RunDirectory second(tmp / "r", RunMode::resume); }),
               Catch::Contains("in use by another running `xmctrain train`"));
  }
  // The lock goes with its holder: the same files read as a killed run again.
  CHECK_FALSE(run_directory_in_use(tmp / "r"));
  CHECK(read_run_directory(tmp / "r").status == RunStatus::incomplete);
}

TEST_CASE("a train command that fails its checks leaves no lock file and no directory behind") {
  TempDir tmp;
  make_run(tmp / "held", 1, false);
  CHECK_THAT(input_error_message([&] { RunDirectory d(tmp / "held", RunMode::fresh); }),
             Catch::Contains("already holds a run"));
  CHECK_FALSE(fs::exists(tmp / "held" / run_file::lock));
  CHECK_THAT(input_error_message([&] { RunDirectory d(tmp / "new" / "deep", RunMode::resume); }),
             Catch::Contains("no checkpoint"));
  CHECK_FALSE(fs::exists(tmp / "new"));
}
