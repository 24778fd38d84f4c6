#include "io/load.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/resources.h"
#include "io/file_util.h"

namespace xmc {
// The parameters as JSON (the key that says whether generated files are current).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SynthConfig, train, test, labels, features, clusters, alpha,
                                   labels_per_point, max_labels, noise, nnz, seed, format)
}  // namespace xmc

namespace xmc::io {
namespace {

// "npy" (.npy) or "hdf5" (.h5, .hdf5) by the extension of a features file in any case,
// else "".
std::string dense_format(const std::string& path) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".npy") return "npy";
  if (ext == ".h5" || ext == ".hdf5") return "hdf5";
  return "";
}

std::string resolve_format(const DataSource& src) {
  if (src.format != "auto") return src.format;
  if (!src.path.empty()) return "xc";
  const std::string dense = dense_format(src.features);
  return dense.empty() ? "split" : dense;
}

}  // namespace

Dataset load_dataset(const DataSource& src) {
  if (!src.path.empty() && !src.features.empty())
    throw_input(
        "data source names both a combined file '{}' and a features file '{}': "
        "expected one of them",
        src.path, src.features);
  const std::string format = resolve_format(src);
  Stopwatch sw;
  Dataset ds;
  if (format == "xc") {
    if (src.path.empty())
      throw_input("format 'xc' needs a combined file (path), got features '{}'", src.features);
    ds = read_xc_combined(src.path, src.read);
  } else if (format == "split" || format == "npy" || format == "hdf5") {
    if (src.features.empty() || src.labels.empty())
      throw_input(
          "format '{}' needs both a features and a labels file, got features '{}' and "
          "labels '{}'",
          format, src.features, src.labels);
    if (format == "split")
      ds = read_xc_split(src.features, src.labels, src.read);
    else
      ds = join_features_and_labels(
          format == "npy" ? read_npy(src.features) : read_hdf5(src.features, src.hdf5_dataset),
          src.features, src.labels, src.read);
  } else {
    throw_input("unknown data format '{}': expected one of auto, xc, split, npy, hdf5", src.format);
  }
  spdlog::info("loaded {}: {} points, {} features ({}), {} labels in {:.2f} s", ds.source,
               ds.num_points(), ds.num_features(), ds.sparse() ? "sparse" : "dense",
               ds.num_labels(), sw.seconds());
  return ds;
}

void check_compatible(const Dataset& train, const Dataset& test) {
  if (train.num_features() != test.num_features())
    throw_input("feature dimension mismatch: train '{}' has D = {} but test '{}' has D = {}",
                train.source, train.num_features(), test.source, test.num_features());
  if (train.num_labels() != test.num_labels())
    throw_input("label count mismatch: train '{}' has L = {} but test '{}' has L = {}",
                train.source, train.num_labels(), test.source, test.num_labels());
  if (train.sparse() != test.sparse())
    throw_input("feature kind mismatch: train '{}' is {} but test '{}' is {}", train.source,
                train.sparse() ? "sparse" : "dense", test.source,
                test.sparse() ? "sparse" : "dense");
}

void write_synthetic(const SynthData& data, const SynthConfig& cfg_in, const std::string& out_dir) {
  SynthConfig cfg = cfg_in;
  cfg.resolve();
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw_input("synth: cannot create the output directory '{}': {}", out_dir, ec.message());
  const fs::path dir(out_dir);
  // The marker of a complete set goes first: an interrupted run leaves none.
  fs::remove(dir / "synth.json", ec);
  if (ec) throw_input("synth: cannot remove '{}': {}", (dir / "synth.json").string(), ec.message());
  nlohmann::json files;
  if (cfg.format == "dense") {
    write_npy((dir / "trn_X.npy").string(), data.train.dense_features());
    write_npy((dir / "tst_X.npy").string(), data.test.dense_features());
    write_xc_sparse((dir / "trn_X_Y.txt").string(), data.train.labels);
    write_xc_sparse((dir / "tst_X_Y.txt").string(), data.test.labels);
    files = {{"train", {{"features", "trn_X.npy"}, {"labels", "trn_X_Y.txt"}}},
             {"test", {{"features", "tst_X.npy"}, {"labels", "tst_X_Y.txt"}}}};
  } else {
    write_xc_combined((dir / "train.txt").string(), data.train.sparse_features(),
                      data.train.labels);
    write_xc_combined((dir / "test.txt").string(), data.test.sparse_features(), data.test.labels);
    files = {{"train", "train.txt"}, {"test", "test.txt"}};
  }
  nlohmann::json j = {{"parameters", nlohmann::json(cfg)},
                      {"files", files},
                      {"oracle_p1", data.oracle_p1},
                      {"popularity_p1", data.popularity_p1}};
  AtomicFile f((dir / "synth.json").string());
  f.write(j.dump(2) + "\n");
  f.commit();
}

namespace {

// The file names write_synthetic writes for a format, synth.json last.
std::vector<std::string> synthetic_files(const std::string& format) {
  if (format == "dense")
    return {"trn_X.npy", "tst_X.npy", "trn_X_Y.txt", "tst_X_Y.txt", "synth.json"};
  return {"train.txt", "test.txt", "synth.json"};
}

// Removes "<name>.tmp.<pid>" files in dir for the given names whose process is gone.
void remove_stale_temporaries(const std::filesystem::path& dir,
                              const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    for (const auto& name : names) {
      const std::string prefix = name + ".tmp.";
      if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string pid = file.substr(prefix.size());
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
      const long id = std::stol(pid);
      if (id <= 0 || (::kill(static_cast<pid_t>(id), 0) != 0 && errno == ESRCH)) {
        std::error_code rm;
        fs::remove(it->path(), rm);
        if (!rm)
          spdlog::info("removed '{}', left by an interrupted generation", it->path().string());
      }
    }
  }
}

}  // namespace

bool synthetic_files_current(const SynthConfig& cfg_in, const std::string& out_dir) {
  namespace fs = std::filesystem;
  SynthConfig cfg = cfg_in;
  cfg.resolve();
  const fs::path dir(out_dir);
  std::vector<std::string> names = synthetic_files(cfg.format);
  remove_stale_temporaries(dir, names);
  names.pop_back();  // synth.json
  for (const auto& n : names)
    if (!fs::exists(dir / n)) return false;
  const fs::path marker = dir / "synth.json";
  nlohmann::json recorded;
  try {
    recorded = nlohmann::json::parse(read_whole_file(marker.string())).at("parameters");
  } catch (const std::exception& e) {
    throw_input(
        "data.synth.enabled: '{}' holds the data files but {} '{}' ({}): they were not "
        "written by a completed generation. Delete them to regenerate, or set "
        "data.synth.enabled: false to use them as they are",
        out_dir, fs::exists(marker) ? "cannot read" : "no", marker.string(), e.what());
  }
  const nlohmann::json wanted(cfg);
  std::vector<std::string> changed;
  for (const auto& [key, value] : wanted.items())
    if (!recorded.contains(key) || recorded[key] != value)
      changed.push_back(fmt::format("data.synth.{} {} (files: {})", key, value.dump(),
                                    recorded.contains(key) ? recorded[key].dump() : "none"));
  if (changed.empty()) return true;
  spdlog::warn(
      "the synthetic data in '{}' was generated with other parameters: {}; "
      "regenerating it",
      out_dir, fmt::join(changed, ", "));
  return false;
}

}  // namespace xmc::io
