// End-to-end reliability (issue 20): a full disk, kills at the worst moments (the
// XMC_DEBUG_KILL_AT hook, no sleeps), SIGINT/SIGTERM, run directories that are never
// silently overwritten or mixed, corrupted checkpoints and changed configs on --resume.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

// The process ended by SIGKILL: run_cli's shell reports it as -1 or as 128 + 9.
bool killed(const CliResult& r) { return r.exit_code == -1 || r.exit_code == 137; }

CliResult train(const fs::path& config, const fs::path& out, std::vector<std::string> extra = {},
                const Env& env = {}) {
  std::vector<std::string> args = {"train", config.string(), "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args, env);
}

Env kill_at(const std::string& point) { return {{"XMC_DEBUG_KILL_AT", point}}; }

std::vector<json> metrics_lines(const fs::path& run) {
  std::vector<json> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The epochs of the per-epoch records of metrics.jsonl, in file order.
std::vector<int> logged_epochs(const fs::path& run) {
  std::vector<int> out;
  for (const auto& j : metrics_lines(run))
    if (j.contains("epoch")) out.push_back(j["epoch"].get<int>());
  return out;
}

bool has_temporaries(const fs::path& dir) {
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// One uninterrupted reference run per test binary (3 epochs of the small problem).
struct Reference {
  TempDir tmp;
  json results;
  Reference() {
    write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
    auto r = train(tmp / "c.yaml", tmp / "run", {"--json"});
    if (r.exit_code != 0) throw std::runtime_error("reference run failed: " + r.err);
    results = json::parse(r.out);
  }
  fs::path config() const { return tmp / "c.yaml"; }
};

const Reference& reference() {
  static Reference ref;
  return ref;
}

// Resumes an interrupted run of the reference config: it must end with the reference's
// metrics and log each epoch once.
void resume_to_the_end(const Reference& ref, const fs::path& run) {
  auto resumed = train(ref.config(), run, {"--resume", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(json::parse(resumed.out)["metrics"] == ref.results["metrics"]);
  CHECK(logged_epochs(run) == std::vector<int>{1, 2, 3});
}

}  // namespace

TEST_CASE("a checkpoint write that hits a full disk fails cleanly on fresh runs and on resume") {
  const auto& ref = reference();
  TempDir tmp;
  SECTION("fresh run") {
    // The disk fills at the file's creation, inside a dataset, and at the final flush.
    for (long long budget : {0LL, 4096LL, 300000LL}) {
      INFO("bytes before ENOSPC: " << budget);
      const fs::path run = tmp / std::to_string(budget);
      auto r = train(ref.config(), run, {}, disk_full_env("checkpoint.h5.tmp", budget));
      INFO(r.err);
      CHECK(r.exit_code == 1);  // not 139 (a segfault in HDF5's exit cleanup), not 2
      CHECK(r.err.find("checkpoint") != std::string::npos);
      CHECK(r.err.find("No space left on device") != std::string::npos);
      CHECK_FALSE(has_temporaries(run));
      CHECK_FALSE(fs::exists(run / "checkpoint.h5"));
      CHECK_FALSE(fs::exists(run / "results.json"));
    }
  }
  SECTION("--resume keeps the last good checkpoint") {
    auto part = train(ref.config(), tmp / "run", {}, kill_at("after_checkpoint:1"));
    REQUIRE(killed(part));
    const std::string good = read_file(tmp / "run" / "checkpoint.h5");
    auto r =
        train(ref.config(), tmp / "run", {"--resume"}, disk_full_env("checkpoint.h5.tmp", 4096));
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("No space left on device") != std::string::npos);
    CHECK_FALSE(has_temporaries(tmp / "run"));
    CHECK(read_file(tmp / "run" / "checkpoint.h5") == good);
    // With space again, the run completes to the uninterrupted result.
    auto again = train(ref.config(), tmp / "run", {"--resume", "--json"});
    INFO(again.err);
    REQUIRE(again.exit_code == 0);
    CHECK(json::parse(again.out)["metrics"] == ref.results["metrics"]);
  }
  SECTION("results.json and metrics.jsonl") {
    for (const std::string file : {"results.json", "metrics.jsonl"}) {
      INFO(file);
      // A run directory whose path does not contain the file's name: only that file fails.
      const fs::path dir = tmp / ("run_" + file.substr(0, file.find('.')));
      auto r = train(ref.config(), dir, {}, disk_full_env(file));
      INFO(r.err);
      CHECK(r.exit_code == 1);
      CHECK(r.err.find((dir / file).string()) != std::string::npos);
      CHECK_FALSE(has_temporaries(dir));
      CHECK_FALSE(fs::exists(dir / "results.json"));
    }
  }
}

TEST_CASE("train --resume of a finished run keeps its results") {
  const auto& ref = reference();
  TempDir tmp;
  SECTION("results.json written: nothing to do") {
    fs::copy(ref.tmp / "run", tmp / "run");
    const std::string before = read_file(tmp / "run" / "results.json");
    const std::string metrics_before = read_file(tmp / "run" / "metrics.jsonl");
    auto r = train(ref.config(), tmp / "run", {"--resume"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("complete") != std::string::npos);
    CHECK(read_file(tmp / "run" / "results.json") == before);
    CHECK(read_file(tmp / "run" / "metrics.jsonl") == metrics_before);
    auto j = train(ref.config(), tmp / "run", {"--resume", "--json"});
    REQUIRE(j.exit_code == 0);
    CHECK(json::parse(j.out) == json::parse(before));
  }
  SECTION("killed after the last checkpoint, before results.json") {
    auto part = train(ref.config(), tmp / "run", {}, kill_at("after_checkpoint:3"));
    REQUIRE(killed(part));
    REQUIRE_FALSE(fs::exists(tmp / "run" / "results.json"));
    auto r = train(ref.config(), tmp / "run", {"--resume", "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    json res = json::parse(read_file(tmp / "run" / "results.json"));
    CHECK(res["metrics"] == ref.results["metrics"]);
    CHECK(std::isfinite(res["samples_per_s"].get<double>()));
    CHECK(res["samples_per_s"].get<double>() > 0);
    CHECK(logged_epochs(tmp / "run") == std::vector<int>{1, 2, 3});
  }
}

TEST_CASE("a kill between a checkpoint and its metrics line loses no epoch of metrics.jsonl") {
  const auto& ref = reference();
  for (const std::string point : {"after_checkpoint:1", "after_checkpoint:2", "after_metrics:2"}) {
    INFO(point);
    TempDir tmp;
    auto part = train(ref.config(), tmp / "run", {}, kill_at(point));
    REQUIRE(killed(part));
    resume_to_the_end(ref, tmp / "run");
  }
}

TEST_CASE("a new run into a directory holding a run is refused unless --overwrite") {
  const auto& ref = reference();
  TempDir tmp;
  fs::copy(ref.tmp / "run", tmp / "run");
  std::map<std::string, std::string> before;
  for (auto f : {"config.resolved.yaml", "metrics.jsonl", "results.json", "checkpoint.h5"})
    before[f] = read_file(tmp / "run" / f);
  auto unchanged = [&] {
    for (const auto& [f, text] : before) {
      INFO(f);
      CHECK(read_file(tmp / "run" / f) == text);
    }
  };
  SECTION("refused, naming --overwrite and --resume, in well under a second of work") {
    auto r = train(ref.config(), tmp / "run", {"--set", "optim.output.lr=0.02"});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--overwrite") != std::string::npos);
    CHECK(r.err.find("--resume") != std::string::npos);
    CHECK(r.err.find("results.json") != std::string::npos);
    unchanged();
  }
  SECTION("--overwrite whose run fails before training leaves the old run intact") {
    auto r = train(ref.config(), tmp / "run",
                   {"--overwrite", "--set", "data.train.features=" + (tmp / "no.npy").string(),
                    "--set", "data.synth.enabled=false"});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("no.npy") != std::string::npos);
    unchanged();
  }
  SECTION("--overwrite replaces the whole run") {
    auto r = train(ref.config(), tmp / "run", {"--overwrite", "--set", "train.epochs=2"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(logged_epochs(tmp / "run") == std::vector<int>{1, 2});
    CHECK(json::parse(read_file(tmp / "run" / "results.json"))["epochs"] == 2);
    CHECK(read_file(tmp / "run" / "config.resolved.yaml").find("epochs: 2") != std::string::npos);
  }
}

TEST_CASE("a run that fails before training leaves no run directory behind") {
  const auto& ref = reference();
  TempDir tmp;
  auto r = train(ref.config(), tmp / "run",
                 {"--set", "data.train.features=" + (tmp / "no.npy").string(), "--set",
                  "data.synth.enabled=false"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no.npy") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "run"));
  // An existing empty directory is kept, and stays empty.
  fs::create_directories(tmp / "empty");
  r = train(ref.config(), tmp / "empty",
            {"--set", "data.train.features=" + (tmp / "no.npy").string(), "--set",
             "data.synth.enabled=false"});
  CHECK(r.exit_code == 2);
  CHECK(fs::is_empty(tmp / "empty"));
}

TEST_CASE("train --resume refuses a changed config unless --allow-config-change which logs it") {
  const auto& ref = reference();
  TempDir tmp;
  auto part = train(ref.config(), tmp / "run", {"--halt-after-epoch", "1"});
  REQUIRE(part.exit_code == 0);
  const std::string config_before = read_file(tmp / "run" / "config.resolved.yaml");
  auto r = train(ref.config(), tmp / "run",
                 {"--resume", "--set", "optim.output.lr=0.02", "--set", "seed=8"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("optim.output.lr") != std::string::npos);
  CHECK(r.err.find("seed") != std::string::npos);
  CHECK(r.err.find("--allow-config-change") != std::string::npos);
  CHECK(read_file(tmp / "run" / "config.resolved.yaml") == config_before);
  CHECK_FALSE(fs::exists(tmp / "run" / "results.json"));

  // Keys that do not change what is computed (threads, the log interval) may differ.
  auto same = train(ref.config(), tmp / "run2", {"--halt-after-epoch", "1"});
  REQUIRE(same.exit_code == 0);
  same = train(ref.config(), tmp / "run2",
               {"--resume", "--set", "threads=1", "--set", "train.log_every_s=5", "--json"});
  INFO(same.err);
  REQUIRE(same.exit_code == 0);
  CHECK(logged_epochs(tmp / "run2") == std::vector<int>{1, 2, 3});
  CHECK(metrics_lines(tmp / "run2").size() == 3);  // no config-change record

  r = train(ref.config(), tmp / "run",
            {"--resume", "--allow-config-change", "--set", "optim.output.lr=0.02"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(tmp / "run" / "config.resolved.yaml").find("0.02") != std::string::npos);
  bool logged = false;
  for (const auto& j : metrics_lines(tmp / "run")) {
    if (!j.contains("config_change")) continue;
    logged = true;
    CHECK(j["after_epoch"] == 1);
    CHECK(j["config_change"].contains("optim.output.lr"));
    CHECK(j["config_change"]["optim.output.lr"]["new"] == "0.02");
  }
  CHECK(logged);
  CHECK(logged_epochs(tmp / "run") == std::vector<int>{1, 2, 3});
}

namespace {

// Overwrites `count` floats of dataset `name` in an HDF5 file with NaN, in place.
void corrupt_dataset(const fs::path& file, const std::string& name, int count) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const haddr_t offset = H5Dget_offset(ds);
  H5Dclose(ds);
  H5Fclose(f);
  REQUIRE(offset != HADDR_UNDEF);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(offset) + 64);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < count; ++i) io.write(reinterpret_cast<const char*>(&nan), sizeof nan);
}

// A 1-D int64 dataset of an HDF5 file (empty when missing).
std::vector<int64_t> read_i64(const fs::path& file, const std::string& name) {
  std::vector<int64_t> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  if (H5Lexists(f, "meta", H5P_DEFAULT) > 0 && H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) {
    hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    out.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
    H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
    H5Sclose(space);
    H5Dclose(ds);
  }
  H5Fclose(f);
  return out;
}

// Removes the checksum attribute of every dataset (a checkpoint of an older version).
herr_t drop_checksum(hid_t obj, const char* name, const H5O_info_t* info, void*) {
  if (info->type == H5O_TYPE_DATASET && H5Aexists_by_name(obj, name, "crc32", H5P_DEFAULT) > 0)
    H5Adelete_by_name(obj, name, "crc32", H5P_DEFAULT);
  return 0;
}

}  // namespace

TEST_CASE("a corrupted checkpoint is detected on load naming the file and the tensor") {
  const auto& ref = reference();
  TempDir tmp;
  fs::copy(ref.tmp / "run", tmp / "run");
  const fs::path ckpt = tmp / "run" / "checkpoint.h5";
  corrupt_dataset(ckpt, "output/weight", 100);
  auto e = run_cli({"eval", "--checkpoint", ckpt.string(), "--json"});
  INFO(e.err);
  CHECK(e.exit_code == 2);
  CHECK(e.err.find("checkpoint.h5") != std::string::npos);
  CHECK(e.err.find("output/weight") != std::string::npos);
  CHECK(e.err.find("checksum") != std::string::npos);
  auto r = train(ref.config(), tmp / "run",
                 {"--resume", "--allow-config-change", "--set", "train.epochs=4"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("output/weight") != std::string::npos);
  CHECK(fs::exists(tmp / "run" / "results.json"));  // the refused resume changed nothing

  // A checkpoint without checksums (older versions) loads, with a warning.
  fs::remove_all(tmp / "run");
  fs::copy(ref.tmp / "run", tmp / "run");
  hid_t f = H5Fopen(ckpt.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5Ovisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, drop_checksum, nullptr);
  H5Fclose(f);
  e = run_cli({"eval", "--checkpoint", ckpt.string(), "--json"});
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  CHECK(e.err.find("no checksums") != std::string::npos);
  CHECK(json::parse(e.out)["metrics"] == ref.results["metrics"]);
}

TEST_CASE(
    "SIGINT and SIGTERM finish the step and write a checkpoint and exit 130 or 143 with a resume "
    "hint") {
  const auto& ref = reference();
  for (const auto& [sig, code] : {std::pair<std::string, int>{"INT", 130}, {"TERM", 143}}) {
    INFO(sig);
    TempDir tmp;
    // The hook raises the signal in the trainer itself during step 30 (epoch 2 of 24 steps).
    auto r = train(ref.config(), tmp / "run", {}, {{"XMC_DEBUG_SIGNAL_AT", sig + ":30"}});
    INFO(r.err);
    CHECK(r.exit_code == code);
    CHECK(r.err.find("--resume") != std::string::npos);
    REQUIRE(fs::exists(tmp / "run" / "checkpoint.h5"));
    // The checkpoint is the one of the interrupted step: 6 steps into epoch 2.
    CHECK(read_i64(tmp / "run" / "checkpoint.h5", "meta/epoch_step").at(0) == 6);
    CHECK_FALSE(fs::exists(tmp / "run" / "results.json"));
    CHECK_FALSE(has_temporaries(tmp / "run"));
    CHECK(logged_epochs(tmp / "run") == std::vector<int>{1});
    resume_to_the_end(ref, tmp / "run");
  }
}

TEST_CASE("predict checks its output path before the work") {
  const auto& ref = reference();
  TempDir tmp;
  const std::string ckpt = (ref.tmp / "run" / "checkpoint.h5").string();
  auto predict = [&](const fs::path& out) {
    return run_cli({"predict", "--checkpoint", ckpt, "--features",
                    (ref.tmp / "data" / "tst_X.npy").string(), "--labels",
                    (ref.tmp / "data" / "tst_X_Y.txt").string(), "--out", out.string()});
  };
  SECTION("a directory") {
    fs::create_directories(tmp / "dir");
    auto r = predict((tmp / "dir").string() + "/");
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("is a directory") != std::string::npos);
    CHECK(r.err.find("wrote") == std::string::npos);
  }
  SECTION("under a regular file") {
    write_file(tmp / "file", "x");
    auto r = predict(tmp / "file" / "pred.txt");
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("not a directory") != std::string::npos);
    CHECK(r.err.find("does not exist") == std::string::npos);
  }
}
