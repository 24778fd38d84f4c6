#pragma once
// Files of the run directory, written as a unit: a new run never mixes with an old one,
// a run that fails before training leaves nothing behind, results.json appears only when
// the run is complete. --resume's checks of the directory, atomic text writes and
// metrics.jsonl maintenance.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace xmc {

// The files of a run directory; the trainer writes them, `xmctrain report` reads them.
namespace run_file {
inline constexpr const char* config = "config.resolved.yaml";  // written when training begins
inline constexpr const char* metrics = "metrics.jsonl";        // one line per finished epoch
inline constexpr const char* checkpoint = "checkpoint.h5";     // last checkpointed epoch
inline constexpr const char* results = "results.json";         // written last: the run finished
inline constexpr const char* failure = "failed.txt";           // the error a begun run stopped on
// Held (an open-file-description write lock) by the train command using the directory, from
// the check of the directory to the process's end; the kernel drops it when the process dies.
inline constexpr const char* lock = ".xmctrain.lock";
}  // namespace run_file

// Whether a live train command holds the run directory's lock (tests it without taking it).
bool run_directory_in_use(const std::filesystem::path& dir);

enum class RunMode {
  fresh,      // a new run: the directory must not hold a run
  overwrite,  // a new run replacing the run in the directory (--overwrite)
  resume,     // continue the run in the directory from its checkpoint (--resume)
};

// The files a run writes, in the order an overwrite removes them (results first, so an
// interrupted removal never leaves results beside a partial run).
inline const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {run_file::results, run_file::failure,
                                                 run_file::metrics, run_file::checkpoint,
                                                 run_file::config};
  return names;
}

// The run directory of one train command. The constructor checks it before any work and
// throws InputError: it must be creatable and writable and not in use by another train
// command (it takes run_file::lock for its lifetime); a fresh run refuses a directory
// holding a run (naming --overwrite and --resume); a resumed run needs its checkpoint. It
// creates missing directories; destroyed before begin() (the run failed before training),
// it removes the directories (and the lock file) it created again.
class RunDirectory {
 public:
  RunDirectory(std::filesystem::path dir, RunMode mode);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // Training starts: removes the files of the earlier run (fresh, overwrite) or the
  // results of the resumed one (it continues), removes stale temporaries, writes the
  // resolved config.
  void begin(const std::string& config_yaml);

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path file(const std::string& name) const { return dir_ / name; }

 private:
  void check();             // the constructor's checks
  void release() noexcept;  // the lock; before begin(), what the checks created

  std::filesystem::path dir_;
  RunMode mode_;
  std::vector<std::filesystem::path> created_;  // outermost first
  bool begun_ = false;
  int lock_fd_ = -1;
  bool lock_created_ = false;  // the lock file did not exist before
};

// What --resume found in the run directory: the checkpoint's position and the config
// changes against it that are not resume-free.
struct Resume {
  ResumePoint from;
  std::vector<ConfigChange> changes;
};

// --resume: reads the checkpoint's position and config and checks them before the data
// is loaded. True when the run is already complete (summary then holds its results).
bool check_resume(const ExperimentConfig& cfg, const TrainOptions& opt,
                  const std::filesystem::path& dir, Resume& r, TrainSummary& summary);

// The changes as "key before -> after, ..." (--resume's messages and log lines).
std::string describe_changes(const std::vector<ConfigChange>& changes);

// Writes the error a run stopped on to failed.txt of its (begun) run directory, for
// `xmctrain report`; a failure to write it is logged, never thrown over the error itself.
void record_run_failure(const std::filesystem::path& dir, const std::string& what);

// Writes to "<path>.tmp.<pid>", then renames (InputError when the path cannot be opened,
// Error naming the file and the system error when a write fails, e.g. on a full disk).
void write_text_atomic(const std::filesystem::path& path, const std::string& text);
// Appends one line and flushes (Error naming the file when the write fails).
void append_line(const std::filesystem::path& path, const std::string& line);
// Keeps only the metrics.jsonl records up to last_epoch (resume after an interruption)
// and returns the per-epoch records kept.
std::vector<nlohmann::json> keep_metrics_lines(const std::filesystem::path& path,
                                               int64_t last_epoch);

}  // namespace xmc
