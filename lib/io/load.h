#pragma once
// One entry point for the trainer: a DataSource (from the config or the command line)
// names the files; load_dataset picks the reader.
#include <string>

#include "data/dataset.h"
#include "io/io.h"

namespace xmc::io {

struct DataSource {
  std::string path;             // XC combined file
  std::string features;         // split / npy / hdf5 features
  std::string labels;           // XC sparse labels (with `features`)
  std::string format = "auto";  // auto | xc | split | npy | hdf5
  std::string hdf5_dataset = "features";
  ReadOptions read;
};

// auto: `path` set -> xc; else by the extension of `features`: .npy -> npy, .h5/.hdf5 ->
// hdf5, anything else -> split. An explicit format is used whatever the file names. Throws
// InputError for an inconsistent source (both `path` and `features`, features without labels,
// unknown format).
Dataset load_dataset(const DataSource& src);

// Train and test must share the feature dimension and the label count.
void check_compatible(const Dataset& train, const Dataset& test);

}  // namespace xmc::io
