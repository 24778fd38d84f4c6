#include "train/run_data.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/resources.h"
#include "data/synthetic.h"
#include "io/load.h"

namespace xmc {
namespace fs = std::filesystem;

namespace {

io::DataSource to_source(const DataSourceConfig& c, bool cache) {
  return {.path = c.path,
          .features = c.features,
          .labels = c.labels,
          .format = c.format,
          .hdf5_dataset = c.hdf5_dataset,
          .read = {.index_base = static_cast<int>(c.index_base), .use_cache = cache}};
}

bool is_set(const DataSourceConfig& c) { return !c.path.empty() || !c.features.empty(); }

}  // namespace

void ensure_synthetic_data(const ExperimentConfig& cfg) {
  const SynthSpec& sp = cfg.data.synth;
  if (!sp.enabled) return;
  const bool dense = sp.format == "dense";
  // The files write_synthetic produces, in the folder of data.train.
  const DataSourceConfig& tr = cfg.data.train;
  const DataSourceConfig& te = cfg.data.test;
  const std::string anchor = dense ? tr.features : tr.path;
  if (anchor.empty())
    throw_input(
        "data.synth.enabled: set data.train.{} to the file to generate "
        "(e.g. datasets/synth/{})",
        dense ? "features" : "path", dense ? "trn_X.npy" : "train.txt");
  const fs::path dir = fs::path(anchor).parent_path();
  struct Expect {
    const char* key;
    std::string value;
    const char* file;
  };
  std::vector<Expect> expected;
  if (dense) {
    expected = {{"data.train.features", tr.features, "trn_X.npy"},
                {"data.train.labels", tr.labels, "trn_X_Y.txt"},
                {"data.test.features", te.features, "tst_X.npy"},
                {"data.test.labels", te.labels, "tst_X_Y.txt"}};
  } else {
    expected = {{"data.train.path", tr.path, "train.txt"}, {"data.test.path", te.path, "test.txt"}};
  }
  for (const auto& e : expected) {
    if (fs::path(e.value) != dir / e.file)
      throw_input("data.synth.enabled: {} is '{}', but the generator writes '{}'", e.key, e.value,
                  (dir / e.file).string());
  }
  SynthConfig sc = sp;
  sc.resolve();
  if (io::synthetic_files_current(sc, dir.string())) return;
  Stopwatch sw;
  SynthData data = generate_synthetic(sc);
  io::write_synthetic(data, sc, dir.string());
  spdlog::info("generated synthetic data in {} ({:.1f}s; oracle P@1 {:.3f}, popularity P@1 {:.3f})",
               dir.string(), sw.seconds(), data.oracle_p1, data.popularity_p1);
}

RunData::RunData(const ExperimentConfig& cfg, Context& ctx) {
  ensure_synthetic_data(cfg);
  if (!is_set(cfg.data.train)) throw_input("data.train: no training data given (path or features)");
  if (!is_set(cfg.data.test)) throw_input("data.test: no test data given (path or features)");
  Stopwatch load_time;
  train = io::load_dataset(to_source(cfg.data.train, cfg.data.cache));
  test = io::load_dataset(to_source(cfg.data.test, cfg.data.cache));
  io::check_compatible(train, test);
  mem = LedgerEntry(ctx.ledger(), MemTag::data, static_cast<int64_t>(train.bytes() + test.bytes()));
  spdlog::info("data: {} train / {} test points, D={}, L={} ({:.1f}s)", train.num_points(),
               test.num_points(), train.num_features(), train.num_labels(), load_time.seconds());
  meta.input_dim = train.num_features();
  meta.num_labels = train.num_labels();
  meta.n_train = train.num_points();
  meta.sparse_input = train.sparse();
  meta.label_freq = label_frequencies(train.labels);
  if (!cfg.data.filter.empty()) filter = read_filter_file(cfg.data.filter);
  es.k = static_cast<int>(cfg.eval.k);
  es.batch_size = cfg.eval.batch_size;
  es.filter = filter.empty() ? nullptr : &filter;
  es.inv_prop = model_propensities(cfg.data, cfg.data.propensity, meta);
}

}  // namespace xmc
