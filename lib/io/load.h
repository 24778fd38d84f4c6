#pragma once
// One entry point for the trainer: a DataSource (from the config or the command line)
// names the files; load_dataset picks the reader. And the files of the synthetic data
// (data/synthetic.h), written and checked.
#include <string>

#include "data/dataset.h"
#include "data/synthetic.h"
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

// Writes the files into out_dir (created if missing): dense -> trn_X.npy, tst_X.npy,
// trn_X_Y.txt, tst_X_Y.txt; sparse -> train.txt, test.txt; both -> synth.json
// (parameters, files, oracle_p1, popularity_p1). Each file is written atomically.
// synth.json is removed first and written last: it marks a complete set.
void write_synthetic(const SynthData& data, const SynthConfig& cfg, const std::string& out_dir);

// Whether out_dir holds complete data written by write_synthetic for cfg. First removes the
// temporaries ("<file>.tmp.<pid>") a killed generation left, when that process is gone.
// false (the caller generates) when a file is missing, or when synth.json records other
// parameters (a warning names each changed one, as "data.synth.<name>"). InputError when
// every data file is present but synth.json is missing or unreadable: files that the
// generator did not finish, or did not write, are not overwritten.
bool synthetic_files_current(const SynthConfig& cfg, const std::string& out_dir);

}  // namespace xmc::io
