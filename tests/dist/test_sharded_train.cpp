// Label-sharded training under mpirun -np 2 against the same run in one process (built
// only with MPI; CTest runs it as its own test binary).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/checkpoint.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<std::pair<std::string, std::string>> kRootOk = {
    {"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
const std::vector<std::string> kTwo = {XMC_MPIEXEC, "-np", "2", "--oversubscribe"};

std::vector<double> epoch_losses(const fs::path& dir) {
  std::vector<double> out;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line)["loss"]);
  return out;
}

// One output layer trained in one process ("one") and over two label shards ("two") on
// the small problem made larger and smoother (6000 / 3000 points, 6 epochs of a cosine
// schedule to 0: at a constant lr the epochs' P@1 moved ±3 points on this set, in one
// process too); then the set evaluated from one process and a sharded run killed after
// epoch 3's checkpoint and resumed, both checked against "two".
struct ShardedAgainstOne {
  TempDir tmp;
  std::string output;
  json one, two;

  explicit ShardedAgainstOne(std::string out) : output(std::move(out)) {
    write_file(tmp / "c.yaml", small_train_config(tmp / "data", 6));
    REQUIRE(train("one", false).exit_code == 0);
    const CliResult r = train("two", true);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    one = json::parse(read_file(tmp / "one" / "results.json"));
    two = json::parse(read_file(tmp / "two" / "results.json"));
    REQUIRE(two["ranks"].size() == 2);
  }
  CliResult train(const std::string& out, bool sharded, const std::vector<std::string>& extra = {},
                  const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<std::string> a = {"train", (tmp / "c.yaml").string(),
                                  "--out", (tmp / out).string(),
                                  "--set", "threads=1",
                                  "--set", "model.output=" + output,
                                  "--set", "optim.schedule={type: cosine}",
                                  "--set", "data.synth.train=6000",
                                  "--set", "data.synth.test=3000"};
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::pair<std::string, std::string>> e = env;
    e.insert(e.end(), kRootOk.begin(), kRootOk.end());
    return sharded ? run_cli(a, e, kTwo) : run_cli(a);
  }
  double p1(const json& r) const { return r["metrics"]["P@1"].get<double>(); }
  double rank_bytes(int r) const { return two["ranks"][r]["output_layer_bytes"].get<double>(); }
  void check_eval_and_resume() {
    const CliResult ev =
        run_cli({"eval", "--checkpoint", (tmp / "two" / "checkpoint.h5").string(), "--json"});
    INFO(ev.err);
    REQUIRE(ev.exit_code == 0);
    CHECK(json::parse(ev.out)["metrics"]["P@1"].get<double>() == p1(two));
    CHECK(train("killed", true, {},
                {{"XMC_DEBUG_KILL_AT", "after_checkpoint:3"}, {"XMC_DEBUG_RANK", "1"}})
              .exit_code != 0);
    REQUIRE(train("killed", true, {"--resume"}).exit_code == 0);
    CHECK(p1(json::parse(read_file(tmp / "killed" / "results.json"))) == p1(two));
    CHECK(epoch_losses(tmp / "killed") == epoch_losses(tmp / "two"));
  }
};

}  // namespace

TEST_CASE("dense / bottleneck / fixed_fanin over two label shards train as one process does") {
  // bce and squared hinge are per label; softmax's normaliser spans both shards (its
  // pass-1 statistics merged over the processes); bottleneck's projection is on every
  // process, its gradient summed over them.
  // fixed_fanin: the intermediate layer on every process, its gradient summed over them
  // (no rewiring here: a shard prunes its own slots, so rewiring runs differ — below).
  const std::string output =
      GENERATE(as<std::string>{}, "{type: dense, loss: bce, chunk_size: 128}",
               "{type: dense, loss: softmax, chunk_size: 128}",
               "{type: bottleneck, dim: 16, loss: bce, chunk_size: 128}",
               "{type: bottleneck, dim: 16, loss: softmax, chunk_size: 128}",
               "{type: fixed_fanin, fan_in: 16, intermediate: 128, "
               "dropout: 0.1, chunk_size: 128}");
  INFO("model.output " << output);
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
  const CliResult one =
      run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "one").string(), "--set",
               "threads=1", "--set", "model.output=" + output});
  REQUIRE(one.exit_code == 0);
  const CliResult two =
      run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "two").string(), "--set",
               "threads=1", "--set", "model.output=" + output},
              kRootOk, kTwo);
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  // Rank 0 alone prints the summary and writes the run directory.
  CHECK(two.out.find("run directory") == two.out.rfind("run directory"));
  const json r1 = json::parse(read_file(tmp / "one" / "results.json"));
  const json r2 = json::parse(read_file(tmp / "two" / "results.json"));
  CHECK(r2["processes"] == 2);
  CHECK(r2["labels_per_process"] == 150);
  CHECK(r2["comm_seconds"].get<double>() > 0.0);
  // Every rank's figures, in rank order: 150 labels each, the same layer size.
  REQUIRE(r2["ranks"].size() == 2);
  for (int r = 0; r < 2; ++r) {
    const json& k = r2["ranks"][r];
    CHECK(k["rank"] == r);
    CHECK(k["labels"] == 150);
    CHECK(k["peak_rss_bytes"].get<int64_t>() > 0);
    CHECK(k["ledger_peak_bytes"].get<int64_t>() >= k["output_layer_bytes"].get<int64_t>());
    CHECK(k["comm_seconds"].get<double>() > 0.0);
  }
  CHECK(r2["ranks"][0]["output_layer_bytes"] == r2["ranks"][1]["output_layer_bytes"]);
  CHECK(r2["ranks"][0]["output_layer_bytes"] == r2["output_layer_bytes"]);
  CHECK(std::abs(r2["metrics"]["P@1"].get<double>() - r1["metrics"]["P@1"].get<double>()) <= 0.005);
  const auto l1 = epoch_losses(tmp / "one"), l2 = epoch_losses(tmp / "two");
  REQUIRE(l1.size() == 3);
  REQUIRE(l2.size() == 3);
  for (size_t e = 0; e < l1.size(); ++e) CHECK(l2[e] == Approx(l1[e]).epsilon(1e-4));
  // Each rank holds half the label rows: the layer's bytes are below the single process's.
  CHECK(r2["output_layer_bytes"].get<double>() < r1["output_layer_bytes"].get<double>());
  // One process reads the shards (label rows concatenated, the projection from the first)
  // and reproduces the sharded run's metrics.
  const CliResult ev =
      run_cli({"eval", "--checkpoint", (tmp / "two" / "checkpoint.h5").string(), "--json"});
  INFO(ev.err);
  REQUIRE(ev.exit_code == 0);
  CHECK(json::parse(ev.out)["metrics"]["P@1"].get<double>() == r2["metrics"]["P@1"].get<double>());
  // The encoder is in rank 0's file only (the ranks' copies are the same); rank 1's shard
  // holds its labels' state and the run's position.
  {
    const fs::path index = tmp / "two" / "checkpoint.h5";
    const xmc::ShardIndex idx = xmc::read_shard_index(xmc::CheckpointReader(index.string()), 300);
    const xmc::CheckpointReader file0(index.string());
    const xmc::CheckpointReader file1(xmc::shard_file(index, idx.step, 1).string());
    CHECK(file0.has("encoder/0/weight"));
    CHECK_FALSE(file1.has("encoder/0/weight"));
    CHECK(file1.has("meta/step"));
  }
  // A one-process checkpoint is not split over processes: refused, naming why.
  const CliResult ev2 = run_cli(
      {"eval", "--checkpoint", (tmp / "one" / "checkpoint.h5").string(), "--json"}, kRootOk, kTwo);
  CHECK(ev2.exit_code == 2);
  CHECK(ev2.err.find("a one-process checkpoint holds 1 shard: evaluate it with at most 1 "
                     "process") != std::string::npos);
}

TEST_CASE("fixed_fanin with rewiring over two label shards stays near the one-process run") {
  // Each shard prunes the smallest fraction of its own slots (one process: of all slots
  // together) and regrows from its labels' streams: not the same run, the same method.
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
  const std::vector<std::string> args = {
      "--set", "threads=1", "--set",
      "model.output={type: fixed_fanin, fan_in: 16, intermediate: 128, chunk_size: 128, "
      "rewire: {interval: 10, fraction: 0.1, until: 0.66}}"};
  auto train = [&](const std::string& out, bool sharded,
                   std::vector<std::pair<std::string, std::string>> env = {},
                   const std::string& extra = "") {
    std::vector<std::string> a = {"train", (tmp / "c.yaml").string(), "--out",
                                  (tmp / out).string()};
    a.insert(a.end(), args.begin(), args.end());
    if (!extra.empty()) a.push_back(extra);
    env.insert(env.end(), kRootOk.begin(), kRootOk.end());
    return sharded ? run_cli(a, env, kTwo) : run_cli(a);
  };
  REQUIRE(train("one", false).exit_code == 0);
  const CliResult two = train("two", true);
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  // Rank 0 rewired its own 150 labels × 16 slots.
  CHECK(two.err.find("rewired 240 of 2400 connections") != std::string::npos);
  const json r1 = json::parse(read_file(tmp / "one" / "results.json"));
  const json r2 = json::parse(read_file(tmp / "two" / "results.json"));
  CHECK(std::abs(r2["metrics"]["P@1"].get<double>() - r1["metrics"]["P@1"].get<double>()) <= 0.005);
  const auto l1 = epoch_losses(tmp / "one"), l2 = epoch_losses(tmp / "two");
  REQUIRE(l1.size() == 3);
  REQUIRE(l2.size() == 3);
  for (size_t e = 0; e < l1.size(); ++e) CHECK(l2[e] == Approx(l1[e]).epsilon(0.01));

  // Rank 1 killed after epoch 2's checkpoint; the resumed sharded run (indices, weights,
  // moments per shard, the intermediate layer from each rank's own file) ends where the
  // uninterrupted one did.
  CHECK(
      train("killed", true, {{"XMC_DEBUG_KILL_AT", "after_checkpoint:2"}, {"XMC_DEBUG_RANK", "1"}})
          .exit_code != 0);
  REQUIRE(train("killed", true, {}, "--resume").exit_code == 0);
  const json rk = json::parse(read_file(tmp / "killed" / "results.json"));
  CHECK(rk["metrics"]["P@1"].get<double>() == r2["metrics"]["P@1"].get<double>());
  CHECK(epoch_losses(tmp / "killed") == l2);
}

TEST_CASE("lsh_sampled / anns_sampled over two label shards stay near the one-process run") {
  // Each process draws its share of the candidates among its own labels (its own LSH
  // tables / HNSW index, its own uniform draws): not the same candidates as one process,
  // the same method. The sampled softmax normalises over both shards' candidates; label
  // queries hash the vectors of every positive (all-reduced).
  const std::string output = GENERATE(
      as<std::string>{},
      "{type: lsh_sampled, loss: softmax, k: 4, tables: 8, max_candidates: 64, "
      "min_candidates: 32, rebuild_interval: 10, chunk_size: 128}",
      "{type: lsh_sampled, loss: softmax, query: label, k: 4, tables: 8, max_candidates: 64, "
      "min_candidates: 32, rebuild_interval: 10, eval_search: lsh, eval_candidates: 64, "
      "chunk_size: 128}",
      "{type: anns_sampled, loss: bce, hard_negatives: 16, random_negatives: 32, "
      "start_epoch: 1, synchronous: true, search: hnsw, chunk_size: 128}");
  INFO("model.output " << output);
  ShardedAgainstOne run(output);
  for (int r = 0; r < 2; ++r) CHECK(run.two["ranks"][r]["labels"] == 150);
  INFO("P@1 one process " << run.p1(run.one) << ", two " << run.p1(run.two));
  CHECK(run.p1(run.one) > 0.5);  // it learnt something
  CHECK(std::abs(run.p1(run.two) - run.p1(run.one)) <= 0.005);
  // Half the label rows (and tables) per process: about half the layer's ledger bytes (a
  // little less for lsh_sampled, whose one-process run also reserves the device draw's
  // per-batch arrays, which a label-sharded run, keeping the host sampler, does not).
  const double bytes1 = run.one["output_layer_bytes"].get<double>();
  for (int r = 0; r < 2; ++r) {
    CHECK(run.rank_bytes(r) < 0.65 * bytes1);
    CHECK(run.rank_bytes(r) > 0.3 * bytes1);
  }
  // One process evaluates both shards side by side as they were trained (each with its
  // own tables / index); the resumed run reads each rank's tables / hard sets.
  run.check_eval_and_resume();
}

TEST_CASE("each rank's output layer holds about half the one-process bytes (16000 labels)") {
  // At the other tests' 300 labels the step's workspaces and the replicated parts (a
  // projection, the intermediate layer) are a third or more of a layer; at 16000 labels
  // the label arrays dominate, as they do at scale: every backend's rank then holds about
  // half of what one process holds (measured 50.4-54.3%).
  const std::string output = GENERATE(
      as<std::string>{}, "{type: dense, loss: bce, chunk_size: 128}",
      "{type: bottleneck, dim: 16, loss: bce, chunk_size: 128}",
      "{type: fixed_fanin, fan_in: 16, intermediate: 128, chunk_size: 128}",
      "{type: group_shared, group_size: 4, fan_in: 16, head_fraction: 0.1, chunk_size: 128}",
      "{type: lsh_sampled, loss: softmax, k: 4, tables: 8, max_candidates: 64, "
      "min_candidates: 32, rebuild_interval: 10, chunk_size: 128}",
      "{type: anns_sampled, loss: bce, hard_negatives: 16, random_negatives: 32, "
      "start_epoch: 1, synchronous: true, search: hnsw, chunk_size: 128}");
  INFO("model.output " << output);
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  auto train = [&](const std::string& out, bool sharded) {
    const std::vector<std::string> a = {"train", (tmp / "c.yaml").string(),
                                        "--out", (tmp / out).string(),
                                        "--set", "threads=1",
                                        "--set", "model.output=" + output,
                                        "--set", "data.synth.labels=16000",
                                        "--set", "data.synth.test=500"};
    return sharded ? run_cli(a, kRootOk, kTwo) : run_cli(a);
  };
  REQUIRE(train("one", false).exit_code == 0);
  const CliResult two = train("two", true);
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  const json r1 = json::parse(read_file(tmp / "one" / "results.json"));
  const json r2 = json::parse(read_file(tmp / "two" / "results.json"));
  const double bytes1 = r1["output_layer_bytes"].get<double>();
  REQUIRE(r2["ranks"].size() == 2);
  CHECK(r2["ranks"][0]["labels"].get<int64_t>() + r2["ranks"][1]["labels"].get<int64_t>() == 16000);
  for (int r = 0; r < 2; ++r) {
    const double share = r2["ranks"][r]["output_layer_bytes"].get<double>() / bytes1;
    INFO("rank " << r << ": " << share << " of the one-process layer");
    CHECK(share > 0.45);
    CHECK(share < 0.56);
  }
}

TEST_CASE("a sharded checkpoint set: eval from one process, resume, a dead rank, a signal") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
  auto train = [&](const std::string& out, std::vector<std::string> extra,
                   std::vector<std::pair<std::string, std::string>> env) {
    std::vector<std::string> args = {
        "train", (tmp / "c.yaml").string(), "--out", (tmp / out).string(), "--set", "threads=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    env.insert(env.end(), kRootOk.begin(), kRootOk.end());
    return run_cli(args, env, kTwo);
  };
  auto p1 = [&](const std::string& out) {
    return json::parse(read_file(tmp / out / "results.json"))["metrics"]["P@1"].get<double>();
  };
  REQUIRE(train("full", {}, {}).exit_code == 0);
  // Rank 0's checkpoint.h5 plus rank 1's shard of the last step; earlier shards are gone.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(tmp / "full"))
    if (e.path().extension() == ".h5") files.push_back(e.path().filename().string());
  CHECK(files.size() == 2);

  // One process reads every shard and reproduces the sharded run's metrics.
  const std::string ckpt = (tmp / "full" / "checkpoint.h5").string();
  const CliResult ev = run_cli({"eval", "--checkpoint", ckpt, "--json"});
  INFO(ev.err);
  REQUIRE(ev.exit_code == 0);
  CHECK(json::parse(ev.out)["metrics"]["P@1"].get<double>() == p1("full"));
  // So do two processes, each loading the shard it owns; rank 0 alone prints.
  const CliResult ev2 = run_cli({"eval", "--checkpoint", ckpt, "--json"}, kRootOk, kTwo);
  INFO(ev2.err);
  REQUIRE(ev2.exit_code == 0);
  CHECK(json::parse(ev2.out)["metrics"] == json::parse(ev.out)["metrics"]);
  // predict: the same file from one process and from two (rank 0 writes it).
  const std::string test_data = (tmp / "data" / "tst_X.npy").string();
  const std::string test_labels = (tmp / "data" / "tst_X_Y.txt").string();
  auto predict = [&](const std::string& out, const std::vector<std::string>& launcher) {
    return run_cli({"predict", "--checkpoint", ckpt, "--features", test_data, "--labels",
                    test_labels, "--k", "5", "--out", (tmp / out).string()},
                   kRootOk, launcher);
  };
  REQUIRE(predict("pred1.txt", {}).exit_code == 0);
  REQUIRE(predict("pred2.txt", kTwo).exit_code == 0);
  CHECK(read_file(tmp / "pred1.txt") == read_file(tmp / "pred2.txt"));
  // More processes than shards: refused on every rank, nothing printed.
  const CliResult ev3 = run_cli({"eval", "--checkpoint", ckpt, "--json"}, kRootOk,
                                {XMC_MPIEXEC, "-np", "3", "--oversubscribe"});
  CHECK(ev3.exit_code == 2);
  CHECK(ev3.err.find("at most 2 processes (mpirun -np 2), not 3") != std::string::npos);
  CHECK(ev3.out.empty());

  // Rank 1 killed after epoch 2's checkpoint: mpirun ends rank 0 too (no hang), the set of
  // epoch 2 is intact, and --resume with the same two processes finishes the same run.
  const CliResult killed =
      train("killed", {}, {{"XMC_DEBUG_KILL_AT", "after_checkpoint:2"}, {"XMC_DEBUG_RANK", "1"}});
  CHECK(killed.exit_code != 0);
  CHECK_FALSE(fs::exists(tmp / "killed" / "results.json"));
  const CliResult one =
      run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "killed").string(), "--resume"});
  CHECK(one.exit_code == 2);
  CHECK(one.err.find("resume it with mpirun -np 2") != std::string::npos);
  {
    const CliResult resumed = train("killed", {"--resume"}, {});
    INFO(resumed.err);  // its stderr, should the resume fail
    REQUIRE(resumed.exit_code == 0);
  }
  CHECK(p1("killed") == p1("full"));
  CHECK(epoch_losses(tmp / "killed") == epoch_losses(tmp / "full"));

  // Killed after the last epoch's checkpoint, before results.json: the resumed run only
  // evaluates, and every rank takes part in that evaluation (no rank waits alone).
  {
    const CliResult killed_last =
        train("last", {}, {{"XMC_DEBUG_KILL_AT", "after_checkpoint:3"}, {"XMC_DEBUG_RANK", "0"}});
    CHECK(killed_last.exit_code != 0);
    const CliResult resumed = train("last", {"--resume"}, {});
    // Both runs' stderr, should the resume fail (it did once in CI under load, exit 1).
    INFO("killed run: " << killed_last.err);
    INFO("resumed run: " << resumed.err);
    REQUIRE(resumed.exit_code == 0);
  }
  CHECK(p1("last") == p1("full"));

  // SIGTERM seen by rank 1 alone: both ranks stop after the same step with one checkpoint
  // set (exit 143), and the resumed run ends where the uninterrupted one did.
  const CliResult sig =
      train("sig", {}, {{"XMC_DEBUG_SIGNAL_AT", "TERM:30"}, {"XMC_DEBUG_RANK", "1"}});
  CHECK(sig.exit_code == 143);
  CHECK(sig.err.find("mpirun -np 2 xmctrain train") != std::string::npos);
  REQUIRE(train("sig", {"--resume"}, {}).exit_code == 0);
  CHECK(p1("sig") == p1("full"));
}

TEST_CASE("group_shared over two label shards trains as one process does") {
  // Every process computes the one-process arrangement and holds its part: half the head
  // positions, half the tail groups (whole), each array drawn as one process draws those
  // rows and groups; the projections and dropout masks on both, the projections'
  // gradients summed. Rewiring and semantic grouping then run per shard (each process
  // prunes its own smallest slots, arranges its own tail labels): the same method, not
  // the same run (measured on three seeds: P@1 within 0.13–0.47 points, losses within 1%).
  const std::string output = GENERATE(
      as<std::string>{},
      "{type: group_shared, group_size: 4, fan_in: 16, head_fraction: 0.1, chunk_size: 128}",
      "{type: group_shared, group_size: 4, fan_in: 16, head_fraction: 0.1, head_dim: 32, "
      "tail_projection: 64, dropout: 0.1, chunk_size: 128}",
      "{type: group_shared, group_size: 4, fan_in: 16, head_fraction: 0.1, grouping: semantic, "
      "rewire: {interval: 10, fraction: 0.1, until: 0.66}, chunk_size: 128}");
  const bool per_shard = output.find("rewire") != std::string::npos;
  INFO("model.output " << output);
  ShardedAgainstOne run(output);
  INFO("P@1 one process " << run.p1(run.one) << ", two " << run.p1(run.two));
  CHECK(run.p1(run.one) > 0.5);
  CHECK(std::abs(run.p1(run.two) - run.p1(run.one)) <= 0.005);
  const auto l1 = epoch_losses(run.tmp / "one"), l2 = epoch_losses(run.tmp / "two");
  REQUIRE(l1.size() == 6);
  REQUIRE(l2.size() == 6);
  for (size_t e = 0; e < l1.size(); ++e)
    CHECK(l2[e] == Approx(l1[e]).epsilon(per_shard ? 0.02 : 1e-4));
  // 300 labels: a head of 32 (16 on each side), 67 tail groups of 4 (33 + 34).
  CHECK(run.two["ranks"][0]["labels"] == 16 + 33 * 4);
  CHECK(run.two["ranks"][1]["labels"] == 16 + 34 * 4);
  const double bytes1 = run.one["output_layer_bytes"].get<double>();
  for (int r = 0; r < 2; ++r) {
    if (output.find("tail_projection") == std::string::npos) {
      // Half the label arrays; the label order [L], the step's workspaces (B×chunk scores,
      // the m×B transposed input: a third of the layer at this size) on both.
      CHECK(run.rank_bytes(r) < 0.8 * bytes1);
      CHECK(run.rank_bytes(r) > 0.35 * bytes1);
    } else {  // + the projections, the dropout mask and their workspaces on both processes
      CHECK(run.rank_bytes(r) < bytes1);
    }
  }
  run.check_eval_and_resume();
}

TEST_CASE("a group_shared head too small to give every process a part is refused with exit 2") {
  // 300 labels at head_fraction 0.01: a head of 4 labels, one group of G = 4, for two
  // processes — the head projection would be on one of them only.
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  const CliResult b =
      run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(), "--set",
               "model.output={type: group_shared, group_size: 4, fan_in: 8, "
               "head_fraction: 0.01, head_dim: 16}"},
              kRootOk, kTwo);
  CHECK(b.exit_code == 2);
  CHECK(b.err.find("the head of 4 labels (1 groups of G = 4) and the tail of 74 groups cannot "
                   "give every process a part of each") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "b" / "results.json"));
}
