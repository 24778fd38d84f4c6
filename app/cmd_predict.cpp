#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "core/error.h"
#include "dist/comm.h"
#include "io/file_util.h"
#include "io/io.h"
#include "io/load.h"
#include "train/evaluation.h"
#include "train/inference.h"

namespace xmc::app {

namespace {

struct PredictOpts {
  std::string checkpoint, data, features, labels, out, device;
  int k = 10, index_base = 0, threads = 0;
};

// comm: the processes of an mpirun job (nullptr: one process).
void predict_checkpoint(const PredictOpts& o, Comm* comm) {
  const bool root = comm == nullptr || comm->is_root();
  // Fail on an unwritable output before the work starts.
  if (root) io::check_output_file(o.out, "--out");
  if (o.data.empty() == o.features.empty())
    throw_input("predict needs exactly one of --data or --features");
  LoadedModel lm = load_model(o.checkpoint, o.device, o.threads, comm);
  io::DataSource src;
  src.path = o.data;
  src.features = o.features;
  src.labels = o.labels;
  src.read.index_base = o.index_base;
  const Dataset data = io::load_dataset(src);
  const auto& meta = lm.model->meta();
  if (data.num_features() != meta.input_dim)
    throw_input("'{}' has D={} features; the checkpoint was trained with D={}", data.source,
                data.num_features(), meta.input_dim);
  EvalSettings es;
  es.k = o.k;
  es.batch_size = lm.config.eval.batch_size;
  const TopK top = predict_dataset(*lm.model, data, es);
  if (!root) return;  // rank 0 has the merged lists
  io::write_xc_sparse(o.out, topk_to_csr(top, meta.num_labels), o.index_base);
  spdlog::info("wrote top-{} predictions of {} points to {}", o.k, data.num_points(), o.out);
}

}  // namespace

Command register_predict(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "predict",
      "Write the top-k labels with scores of every point of --data to --out, in XC label "
      "format: header 'N L', then one row per point of label:score pairs in descending score "
      "order. The file can be scored with 'xmctrain eval --predictions'. The checkpoint of a "
      "label-sharded run (mpirun) is read whole, or under mpirun -np M (M up to the run's "
      "process count) shard by shard, rank 0 writing.");
  auto o = std::make_shared<PredictOpts>();
  sub->add_option("--checkpoint", o->checkpoint, "Checkpoint written by train")->required();
  sub->add_option("--data", o->data, "Points to predict: XC combined file (labels ignored)");
  sub->add_option("--features", o->features,
                  "Points to predict: features file (.npy, .h5, or XC split features) with "
                  "--labels");
  sub->add_option("--labels", o->labels, "Labels file matching --features");
  sub->add_option("--k", o->k, "Labels per point")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--out", o->out, "Predictions file to write")->required();
  sub->add_option("--index-base", o->index_base, "First index in text files (0 or 1)")
      ->check(CLI::IsMember({0, 1}));
  sub->add_option("--device", o->device, "cpu | cuda | auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  sub->add_option("--threads", o->threads, "Threads (0 = all cores)");
  return {sub, [o]() -> int {
            // Under mpirun: each process predicts over its shards of a checkpoint set, rank
            // 0 merges the top-k lists and writes the file (docs/distributed.md).
            run_in_job([&](Comm* comm) { predict_checkpoint(*o, comm); });
            return 0;
          }};
}

}  // namespace xmc::app
