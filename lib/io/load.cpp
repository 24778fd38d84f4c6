#include "io/load.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "core/resources.h"

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

}  // namespace xmc::io
