#pragma once
// A training run directory as `xmctrain report` reads it. Only the files are read
// (config.resolved.yaml, metrics.jsonl, results.json, failed.txt, whether checkpoint.h5
// exists), so runs copied from other machines or written by older versions read too: a
// field a file lacks is simply absent, never an error.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_node.h"
#include "core/enum_names.h"

namespace xmc {

enum class RunStatus {
  complete,    // results.json: the run finished
  incomplete,  // no results.json and no train command in it: killed or interrupted
  running,     // no results.json, and a train command holds the directory's lock
  failed,      // failed.txt: the run stopped on an error
  unreadable,  // a run file exists but cannot be parsed
};
constexpr std::string_view enum_name_list(RunStatus) {
  return "complete, incomplete, running, failed, unreadable";
}

struct RunRecord {
  std::string dir;  // as found (argument, glob match or child of an argument)
  RunStatus status = RunStatus::incomplete;
  std::string reason;  // why not complete, and which lines could not be read; else empty
  bool has_config = false;
  FlatConfig config;                   // config.resolved.yaml flattened
  nlohmann::json results;              // results.json; null when missing
  std::vector<nlohmann::json> epochs;  // metrics.jsonl records, in file order
  int64_t planned_epochs = 0;          // train.epochs of the config; 0 = unknown
  bool has_checkpoint = false;
};

// The run directories named by command-line arguments, in argument order: each argument is
// a directory or a glob pattern (matches in name order); a directory that is not a run
// directory is searched one level down (children in name order). The same directory named
// twice is listed once. Matches that are neither (files, directories without runs) are
// skipped with a warning. InputError when an argument matches nothing or no run is found.
std::vector<std::filesystem::path> find_run_directories(const std::vector<std::string>& args);

// Reads one run directory; never throws for the content of its files (a file that cannot
// be parsed makes the run `unreadable`, with the file, line and parser message as reason).
RunRecord read_run_directory(const std::filesystem::path& dir);

}  // namespace xmc
