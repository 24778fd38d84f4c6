// xmctrain info DATA: dataset statistics (human report, or JSON with --json).
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "data/stats.h"
#include "io/load.h"

namespace xmc::app {

Command register_info(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "info",
      "Print dataset statistics: sizes, non-zeros, label frequency quantiles and histogram.\n"
      "DATA is an XC combined file, or a features file (XC sparse, .npy, .h5/.hdf5) with "
      "--labels.");
  struct Opts {
    std::string data;
    io::DataSource src;
    bool json = false;
    bool no_cache = false;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("DATA", o->data, "XC combined file, or the features file (with --labels)")
      ->required();
  sub->add_option("--labels", o->src.labels, "XC sparse labels file (split / npy / HDF5 data)");
  sub->add_option("--format", o->src.format, "Data format")
      ->check(CLI::IsMember({"auto", "xc", "split", "npy", "hdf5"}))
      ->capture_default_str();
  sub->add_option("--hdf5-dataset", o->src.hdf5_dataset, "Dataset name inside an HDF5 file")
      ->capture_default_str();
  sub->add_option("--index-base", o->src.read.index_base, "First index in the text files")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  sub->add_option("--threads", o->src.read.threads, "Parsing threads (0 = all)")
      ->capture_default_str();
  sub->add_flag("--no-cache", o->no_cache, "Neither read nor write the .xmccache beside the file");
  sub->add_flag("--json", o->json, "Print the statistics as JSON on stdout");

  return {sub, [o]() -> int {
            io::DataSource src = o->src;
            if (src.labels.empty())
              src.path = o->data;
            else
              src.features = o->data;
            src.read.use_cache = !o->no_cache;
            Dataset ds = io::load_dataset(src);
            DatasetStats stats = compute_stats(ds);
            if (o->json)
              std::cout << to_json(stats).dump(2) << "\n";
            else
              std::cout << format_stats(stats);
            return 0;
          }};
}

}  // namespace xmc::app
