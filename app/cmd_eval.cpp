#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "dist/comm.h"
#include "eval/evaluate.h"
#include "eval/filter.h"
#include "eval/propensity.h"
#include "io/io.h"
#include "io/load.h"
#include "train/evaluation.h"
#include "train/inference.h"

namespace xmc::app {
namespace {

// Labels of a data file: an XC combined file ("N D L" header) or an XC label file
// ("N L" header).
CsrMatrix read_labels(const std::string& path, int index_base) {
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot open file", path);
  std::string header;
  std::getline(in, header);
  std::istringstream fields(header);
  int n = 0;
  for (std::string tok; fields >> tok;) ++n;
  in.close();
  io::ReadOptions opt;
  opt.index_base = index_base;
  opt.use_cache = false;  // small files; never write beside another tool's outputs
  if (n == 3) return io::read_xc_combined(path, opt).labels;
  return io::read_xc_sparse(path, opt);
}

void print(const MetricsResult& m, bool json, const nlohmann::json& extra) {
  if (json) {
    nlohmann::json j = extra;
    j["metrics"] = m.to_json();
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << m.table();
  }
}

struct EvalOpts {
  std::string checkpoint, predictions, data, train, filter, family = "auto", device;
  int k = 5, index_base = 0, threads = 0;
  double a = 0.0, b = 0.0;
  bool json = false;
};

// eval --checkpoint; comm: the processes of an mpirun job (nullptr: one process).
void evaluate_checkpoint(const EvalOpts& o, Comm* comm) {
  LoadedModel lm = load_model(o.checkpoint, o.device, o.threads, comm);
  const auto& cfg = lm.config;
  Dataset test;
  if (!o.data.empty()) {
    io::DataSource src;
    src.path = o.data;
    src.read.index_base = o.index_base;
    test = io::load_dataset(src);
  } else {
    io::DataSource src;
    src.path = cfg.data.test.path;
    src.features = cfg.data.test.features;
    src.labels = cfg.data.test.labels;
    src.format = cfg.data.test.format;
    src.hdf5_dataset = cfg.data.test.hdf5_dataset;
    src.read.index_base = static_cast<int>(cfg.data.test.index_base);
    src.read.use_cache = cfg.data.cache;
    test = io::load_dataset(src);
  }
  const auto& meta = lm.model->meta();
  if (test.num_features() != meta.input_dim || test.num_labels() != meta.num_labels)
    throw_input("test data '{}' is D={}, L={}; the checkpoint was trained with D={}, L={}",
                test.source, test.num_features(), test.num_labels(), meta.input_dim,
                meta.num_labels);
  FilterSet filter;
  const std::string filter_path = o.filter.empty() ? cfg.data.filter : o.filter;
  if (!filter_path.empty()) filter = read_filter_file(filter_path);
  EvalSettings es;
  es.k = o.k;
  es.batch_size = cfg.eval.batch_size;
  es.filter = filter.empty() ? nullptr : &filter;
  PropensityConfig prop = cfg.data.propensity;
  if (o.a != 0.0 || o.b != 0.0) {
    prop.a = o.a;
    prop.b = o.b;
  }
  if (o.family != "auto") prop.family = o.family;
  es.inv_prop = model_propensities(cfg.data, prop, meta);
  EvalResult r = evaluate_dataset(*lm.model, test, es);
  if (comm != nullptr && !comm->is_root()) return;  // rank 0 has the metrics
  print(r.metrics, o.json,
        {{"checkpoint", o.checkpoint}, {"data", test.source}, {"eval_seconds", r.seconds}});
}

}  // namespace

Command register_eval(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint on test data (--checkpoint), or score a predictions file "
      "written by any tool (--predictions, XC label format of label:score pairs) against the "
      "true labels (--data) with propensities from the training labels (--train). The "
      "checkpoint of a label-sharded run (mpirun) is read whole, or under mpirun -np M (M up "
      "to the run's process count) shard by shard, rank 0 printing.");
  auto o = std::make_shared<EvalOpts>();
  auto* ck = sub->add_option("--checkpoint", o->checkpoint, "Checkpoint written by train");
  auto* pr = sub->add_option("--predictions", o->predictions,
                             "Predictions file: header 'N L', then per row label:score pairs");
  ck->excludes(pr);
  sub->add_option("--data", o->data,
                  "Test data: XC combined file or XC label file (default with --checkpoint: the "
                  "config's test data)");
  sub->add_option("--train", o->train,
                  "Training labels for propensities (XC combined or label file); with "
                  "--predictions")
      ->needs(pr);
  sub->add_option("--k", o->k, "Metrics at 1..k")->check(CLI::Range(1, 100))->capture_default_str();
  sub->add_option("--filter", o->filter, "File of 'point label' pairs removed from predictions");
  sub->add_option("--a", o->a, "Propensity A (with --b; 0/0 = defaults of the family)");
  sub->add_option("--b", o->b, "Propensity B");
  sub->add_option("--family", o->family, "auto | amazon | wikipedia | other")
      ->check(CLI::IsMember({"auto", "amazon", "wikipedia", "other"}));
  sub->add_option("--index-base", o->index_base, "First index in text files (0 or 1)")
      ->check(CLI::IsMember({0, 1}));
  sub->add_option("--device", o->device, "cpu | cuda | auto (with --checkpoint)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  sub->add_option("--threads", o->threads, "Threads (0 = all cores)");
  sub->add_flag("--json", o->json, "Print the metrics as JSON");
  return {sub, [o]() -> int {
            if (!o->predictions.empty()) {
              if (o->data.empty()) throw_input("eval --predictions needs --data (true labels)");
              if (o->train.empty())
                throw_input("eval --predictions needs --train (training labels, for propensities)");
              io::ReadOptions ropt;
              ropt.index_base = o->index_base;
              ropt.use_cache = false;
              const CsrMatrix pred = io::read_xc_sparse(o->predictions, ropt);
              const CsrMatrix truth = read_labels(o->data, o->index_base);
              const CsrMatrix train = read_labels(o->train, o->index_base);
              if (train.cols != truth.cols)
                throw_input("--train '{}' has {} labels, --data '{}' has {}", o->train, train.cols,
                            o->data, truth.cols);
              FilterSet filter;
              if (!o->filter.empty()) filter = read_filter_file(o->filter);
              double a = o->a, b = o->b;
              if (a == 0.0 && b == 0.0) {
                std::string fam = o->family == "auto" ? std::string(guess_dataset_family(o->train))
                                                      : o->family;
                std::tie(a, b) = propensity_defaults(fam);
              }
              MetricsResult m =
                  evaluate_predictions(pred, truth, label_frequencies(train), train.rows, a, b,
                                       o->k, filter.empty() ? nullptr : &filter);
              print(m, o->json, {{"predictions", o->predictions}, {"a", a}, {"b", b}});
              return 0;
            }
            if (o->checkpoint.empty())
              throw_input("eval needs --checkpoint FILE or --predictions FILE");
            // Under mpirun: each process evaluates its shards of a checkpoint set, rank 0
            // merges the top-k lists, scores and prints (docs/distributed.md).
            run_in_job([&](Comm* comm) { evaluate_checkpoint(*o, comm); });
            return 0;
          }};
}

}  // namespace xmc::app
