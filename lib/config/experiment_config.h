#pragma once
// The experiment config: typed structs with defaults. Each struct lists its fields once,
// in visit(), with a one-line description and its bounds or choices; loading, validation,
// the resolved dump and the Markdown reference all come from that one list. The encoder
// layers and the schedule (model/) declare theirs beside their fields. Load with
// load_config()/parse_config() (config_loader.h).
#include <cstdint>
#include <string>
#include <vector>

#include "config/output_spec.h"
#include "core/field_constraints.h"
#include "core/launch_shape.h"
#include "data/synthetic.h"
#include "model/encoder.h"
#include "model/schedule.h"
#include "ops/optimizer.h"

namespace xmc {

// One input file set (training or test data).
struct DataSourceConfig {
  std::string path;      // combined XC text file
  std::string features;  // split files
  std::string labels;
  std::string format = "auto";
  int64_t index_base = 0;
  std::string hdf5_dataset = "features";

  template <class V>
  void visit(V& v) {
    v.field("path", path, "Combined XC text file (header, then labels and features per line)",
            PathField{});
    v.field("features", features, "Feature file: XC split text, .npy (dense) or .h5", PathField{});
    v.field("labels", labels, "Label file in XC label format (with features)", PathField{});
    v.field("format", format, "File format; auto = from the file extensions",
            Choices{"auto", "xc", "split", "npy", "hdf5"});
    v.field("index_base", index_base, "First feature/label index in text files", Range{0, 1});
    v.field("hdf5_dataset", hdf5_dataset, "Name of the feature dataset inside an HDF5 file");
  }
  bool operator==(const DataSourceConfig&) const = default;
};

// Inverse-propensity parameters for PSP@k: q_l = 1 + C·(N_l + B)^(−A).
struct PropensityConfig {
  double a = 0.0;
  double b = 0.0;
  std::string family = "auto";

  template <class V>
  void visit(V& v) {
    v.field("a", a, "Propensity A; a = b = 0 takes the defaults of the family", Range::at_least(0));
    v.field("b", b, "Propensity B; a = b = 0 takes the defaults of the family", Range::at_least(0));
    v.field("family", family,
            "Dataset family for default A/B (amazon 0.6/2.6, wikipedia 0.5/0.4, other 0.55/1.5); "
            "auto = from the data path",
            Choices{"auto", "amazon", "wikipedia", "other"});
  }
  bool operator==(const PropensityConfig&) const = default;
};

// Synthetic data (data/synthetic.h), generated when enabled and data.train is not given.
struct SynthSpec : SynthConfig {
  bool enabled = false;

  template <class V>
  void visit(V& v) {
    v.field("enabled", enabled, "Generate the synthetic dataset into the folder of data.train when its files are missing");
    v.field("format", format, "Feature type of the generated data", Choices{"dense", "sparse"});
    v.field("train", train, "Training points", Range{1, 1e9});
    v.field("test", test, "Test points", Range{1, 1e9});
    v.field("labels", labels, "Number of labels", Range{1, 1e9});
    v.field("features", features, "Feature dimension; 0 = 256 (dense) or 5000 (sparse vocabulary)", Range{0, 1e8});
    v.field("clusters", clusters, "Latent label clusters",
            Range{1, 1e8});
    v.field("alpha", alpha, "Power-law exponent of the label frequencies (frequency ∝ rank^-alpha)", Range::at_least(0));
    v.field("labels_per_point", labels_per_point, "Mean number of positive labels per point",
            Range::greater_than(0));
    v.field("noise", noise,
            "dense: noise norm relative to the unit signal; sparse: fraction of background "
            "words; -1 = 1.5 (dense) or 0.85 (sparse)",
            Range{-1, 1e6});
    v.field("nnz", nnz, "Non-zeros per point (sparse format)", Range{1, 1e8});
    v.field("seed", seed, "Seed of the generator");
  }
  bool operator==(const SynthSpec&) const = default;
};

struct DataConfig {
  DataSourceConfig train;
  DataSourceConfig test;
  bool cache = true;
  PropensityConfig propensity;
  std::string filter;
  SynthSpec synth;

  template <class V>
  void visit(V& v) {
    v.field("train", train, "Training data");
    v.field("test", test, "Test data");
    v.field("cache", cache, "Keep a binary cache beside text data files for faster reloads");
    v.field("propensity", propensity, "Propensity model for PSP@k");
    v.field("filter", filter, "Optional file of (point, label) pairs removed from test predictions",
            PathField{});
    v.field("synth", synth, "Synthetic data generator");
  }
  bool operator==(const DataConfig&) const = default;
};

// One optimizer: the keys of ops/optimizer.h's struct (ops/ includes no config/).
struct OptimSpec : OptimizerConfig {
  template <class V>
  void visit(V& v) {
    v.field("type", type, "Optimizer");
    v.field("lr", lr, "Base learning rate", Range::greater_than(0));
    v.field("momentum", momentum, "sgd: momentum", Range::half_open(0, 1));
    v.field("weight_decay", weight_decay, "sgd: L2 added to the gradient; adamw: decoupled decay",
            Range::at_least(0));
    v.field("beta1", beta1,
            "adam/adamw: first-moment decay; 0 keeps no first moment (RMSprop with bias "
            "correction: one state array instead of two)",
            Range::half_open(0, 1));
    v.field("beta2", beta2, "adam/adamw: second-moment decay", Range::half_open(0, 1));
    v.field("eps", eps, "adam/adamw: denominator epsilon", Range::greater_than(0));
    v.field("state_precision", state_precision,
            "Storage of the optimizer state of the output layer's label weights: fp32 (4 bytes "
            "per weight per state array) or bf16 (2; needs model.output.precision bf16; "
            "biases, projections and the encoder keep fp32 state)");
    v.field("rowwise", rowwise,
            "adam/adamw with beta1 0: one second moment per label row (the mean of the row's "
            "squared gradients) instead of one per weight, so the label weights keep no "
            "per-weight state (dense and bottleneck; biases, projections keep theirs)");
    v.field("kahan", kahan,
            "Kahan compensation of bf16 or fp8 label weights (dense and bottleneck): one bf16 "
            "value per weight (2 bytes) keeps what each update's rounding dropped and adds it "
            "back at the next, so steps below the weights' precision accumulate. "
            "docs/benchmarks.md, \"Lean precision on WordNet\"");
  }
  bool operator==(const OptimSpec&) const = default;
};

struct OptimConfig {
  OptimSpec encoder;
  OptimSpec output;
  ScheduleConfig schedule;

  template <class V>
  void visit(V& v) {
    v.field("encoder", encoder, "Optimizer of the encoder layers");
    v.field("output", output, "Optimizer of the output layer");
    v.field("schedule", schedule, "Learning-rate schedule (both optimizers)");
  }
  bool operator==(const OptimConfig&) const = default;
};

struct ModelConfig {
  std::vector<EncoderLayerConfig> encoder;
  OutputSpec output;
  std::string bias_init = "zero";
  std::string weight_init = "random";
  double centroid_scale = 0.5;

  template <class V>
  void visit(V& v) {
    v.field("encoder", encoder, "Encoder layers before the output layer; [] = identity");
    v.field("output", output, "Output layer backend and its settings");
    v.field("bias_init", bias_init,
            "Initial output bias: zero, or log_prior (label l starts at log(p/(1-p)), "
            "p = (n_l+0.5)/(N+1) from the training labels, so the first steps need not push "
            "every logit down together; docs/benchmarks.md, WordNet)",
            Choices{"zero", "log_prior"});
    v.field("weight_init", weight_init,
            "Initial label weights: random, or centroid (one pass over the training points "
            "before the first step: label l's weight vector points along the mean of the "
            "encoder outputs of its training points, scaled by centroid_scale over their mean "
            "norm; labels without points keep the random start; backends dense, lsh_sampled "
            "and anns_sampled; docs/benchmarks.md, \"Centroid initialisation\")",
            Choices{"random", "centroid"});
    v.field("centroid_scale", centroid_scale,
            "weight_init centroid: the logit a point of average norm lying along its label's "
            "centroid gets from the weights (the bias aside); 0.5 chosen on the validation "
            "splits of WordNet and GCIDE (docs/benchmarks.md, \"Centroid initialisation\")",
            Range{0.0, 1000.0});
  }
  bool operator==(const ModelConfig&) const = default;
};

struct TrainConfig {
  int64_t epochs = 5;
  int64_t batch_size = 256;
  int64_t eval_every = 1;
  int64_t checkpoint_every = 1;
  double log_every_s = 10.0;
  bool shuffle = true;

  template <class V>
  void visit(V& v) {
    v.field("epochs", epochs, "Number of passes over the training data", Range{1, 100000});
    v.field("batch_size", batch_size, "Points per mini-batch", Range{1, launch::kMaxBatchRows});
    v.field("eval_every", eval_every,
            "Evaluate on the test set every N epochs; 0 = only at the end", Range{0, 100000});
    v.field("checkpoint_every", checkpoint_every,
            "Write a checkpoint every N epochs; 0 = only at the end", Range{0, 100000});
    v.field("log_every_s", log_every_s, "Seconds between progress lines", Range::at_least(0));
    v.field("shuffle", shuffle, "Shuffle the training points every epoch");
  }
  bool operator==(const TrainConfig&) const = default;
};

struct EvalConfig {
  int64_t k = 5;
  int64_t batch_size = 1024;
  std::string search = "exact";
  int64_t ef = 100;

  template <class V>
  void visit(V& v) {
    v.field("k", k, "Metrics are reported at 1..k", Range{1, 100});
    v.field("batch_size", batch_size, "Test points per batch", Range{1, launch::kMaxBatchRows});
    v.field("search", search, "Top-k search: exact, or through the HNSW index (anns_sampled)",
            Choices{"exact", "hnsw"});
    v.field("ef", ef, "hnsw: size of the search candidate list", Range{1, 1 << 20});
  }
  bool operator==(const EvalConfig&) const = default;
};

struct ExperimentConfig {
  std::string name = "run";
  uint64_t seed = 0;
  std::string device = "auto";
  int64_t threads = 0;
  std::string out;
  DataConfig data;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  EvalConfig eval;

  template <class V>
  void visit(V& v) {
    v.field("name", name, "Run name");
    v.field("seed", seed, "Seed of every random choice (init, shuffling, sampling)");
    v.field("device", device, "Where to run; auto = cuda when available",
            Choices{"cpu", "cuda", "auto"});
    v.field("threads", threads, "CPU threads; 0 = all cores", Range{0, 4096});
    v.field("out", out, "Run directory; empty = runs/<name>", PathField{});
    v.field("data", data, "Data");
    v.field("model", model, "Model");
    v.field("optim", optim, "Optimizers");
    v.field("train", train, "Training loop");
    v.field("eval", eval, "Evaluation");
  }
  bool operator==(const ExperimentConfig&) const = default;
};

}  // namespace xmc
