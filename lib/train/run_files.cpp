#include "train/run_files.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <ranges>
#include <string_view>

#include "core/error.h"

namespace xmc {
namespace fs = std::filesystem;

namespace {

std::string system_error() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

// Removes "<name>.tmp.<pid>" files that a killed run left behind, and with `shards` the
// other ranks' checkpoint shards of an earlier label-sharded run (train/checkpoint.h).
void remove_stale_temporaries(const fs::path& dir, bool shards) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool shard = name.starts_with("checkpoint.s") && name.ends_with(".h5");
    if (name.find(".tmp.") != std::string::npos || (shards && shard)) fs::remove(e.path(), ec);
  }
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) throw_error("cannot remove '{}': {}", p.string(), ec.message());
}

// A whole-file write lock owned by the open file description (F_OFD_*): it conflicts with
// every other open of the file, in this process too, and dies with the process.
struct flock whole_file_lock() {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  return fl;
}

// Opens and locks dir/run_file::lock; InputError when another train command holds it.
int take_run_lock(const fs::path& dir, bool& created) {
  const fs::path p = dir / run_file::lock;
  created = !fs::exists(p);
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_input("cannot open the lock file '{}': {}", p.string(), system_error());
  struct flock fl = whole_file_lock();
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return fd;
  const int err = errno;
  ::close(fd);
  if (err == EAGAIN || err == EACCES)
    throw_input(
        "run directory '{}' is in use by another running `xmctrain train` (it holds {}): wait "
        "for it to finish or choose another --out",
        dir.string(), run_file::lock);
  throw_input("cannot lock '{}': {}", p.string(), std::strerror(err));
}

}  // namespace

bool run_directory_in_use(const fs::path& dir) {
  const int fd = ::open((dir / run_file::lock).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock fl = whole_file_lock();
  const bool held = ::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

RunDirectory::RunDirectory(fs::path dir, RunMode mode) : dir_(std::move(dir)), mode_(mode) {
  try {
    check();
  } catch (...) {
    release();  // no destructor runs after a throwing constructor
    throw;
  }
}

void RunDirectory::check() {
  std::error_code ec;
  // The directories that do not exist yet, outermost first.
  for (fs::path p = dir_; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created_.insert(created_.begin(), p);
    if (p == p.parent_path()) break;
  }
  for (size_t i = 0; i < created_.size(); ++i) {
    const fs::path p = created_[i];
    fs::create_directory(p, ec);
    if (ec || !fs::is_directory(p)) {
      const fs::path parent = p.parent_path();
      const std::string why = fs::exists(parent) && !fs::is_directory(parent)
                                  ? fmt::format("'{}' is not a directory", parent.string())
                              : ec ? ec.message()
                                   : std::string("not a directory");
      created_.resize(i);  // the destructor removes the ones made so far
      throw_input("cannot create run directory '{}': {}", dir_.string(), why);
    }
  }
  if (!fs::is_directory(dir_))
    throw_input("cannot use run directory '{}': it is not a directory", dir_.string());
  const fs::path probe = dir_ / (".write-test." + std::to_string(::getpid()));
  {
    std::ofstream f(probe);
    if (!f) throw_input("run directory '{}' is not writable", dir_.string());
  }
  fs::remove(probe, ec);
  lock_fd_ = take_run_lock(dir_, lock_created_);

  std::vector<std::string> present;
  for (const auto& name : run_file_names())
    if (fs::exists(dir_ / name)) present.push_back(name);
  if (mode_ == RunMode::fresh && !present.empty())
    throw_input(
        "run directory '{}' already holds a run ({}): pass --resume to continue it, "
        "--overwrite to replace it, or choose another --out",
        dir_.string(), fmt::join(present, ", "));
  if (mode_ == RunMode::resume && !fs::exists(dir_ / run_file::checkpoint))
    throw_input(
        "--resume: no checkpoint at '{}' (a run interrupted before its first checkpoint "
        "cannot be resumed: start it again with --overwrite)",
        (dir_ / run_file::checkpoint).string());
}

RunDirectory::~RunDirectory() { release(); }

void RunDirectory::release() noexcept {
  std::error_code ec;
  if (!begun_ && lock_created_) fs::remove(dir_ / run_file::lock, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  lock_fd_ = -1;
  if (begun_) return;
  // Innermost first; only directories that are still empty (nothing of the user's).
  for (auto it = created_.rbegin(); it != created_.rend(); ++it)
    if (fs::is_empty(*it, ec)) fs::remove(*it, ec);
}

void RunDirectory::begin(const std::string& config_yaml) {
  if (mode_ == RunMode::resume) {
    remove_file(dir_ / run_file::results);
    remove_file(dir_ / run_file::failure);
  } else {
    for (const auto& name : run_file_names()) remove_file(dir_ / name);
  }
  remove_stale_temporaries(dir_, mode_ != RunMode::resume);
  begun_ = true;
  write_text_atomic(dir_ / run_file::config, config_yaml);
}

// Keys that may differ on --resume without --allow-config-change: where and how fast the
// run is computed, not what it computes.
constexpr std::array<std::string_view, 4> kResumeFreeKeys = {"out", "device", "threads",
                                                             "train.log_every_s"};

std::string describe_changes(const std::vector<ConfigChange>& changes) {
  const auto describe = [](const ConfigChange& c) {
    return fmt::format("{} {} -> {}", c.key, c.before, c.after);
  };
  return fmt::format("{}", fmt::join(changes | std::views::transform(describe), ", "));
}

bool check_resume(const ExperimentConfig& cfg, const TrainOptions& opt, const fs::path& dir,
                  Resume& r, TrainSummary& summary) {
  const fs::path ckpt_file = dir / run_file::checkpoint;
  const fs::path results_file = dir / run_file::results;
  r.from = read_resume_point(CheckpointReader(ckpt_file.string()));
  const ResumePoint& from = r.from;
  // The keys whose values differ between the checkpoint's config and this one; the
  // resume-free ones are moved to `free` (listed separately).
  std::vector<ConfigChange> free;
  for (ConfigChange& c : config_changes(from.config_yaml, opt.config_yaml))
    (std::ranges::find(kResumeFreeKeys, c.key) == kResumeFreeKeys.end() ? r.changes : free)
        .push_back(std::move(c));
  if (!r.changes.empty() && !opt.allow_config_change)
    throw_input(
        "--resume: the config differs from the one the run was trained with in {} ({}). "
        "Resume with the run's config ({}), pass --allow-config-change to continue with the "
        "new values (the change is recorded in metrics.jsonl), or start a new run in another "
        "--out",
        fmt::join(r.changes | std::views::transform(&ConfigChange::key), ", "),
        describe_changes(r.changes), (dir / run_file::config).string());
  if (!free.empty()) spdlog::info("resume: {}", describe_changes(free));
  if (from.epoch > cfg.train.epochs)
    throw_input("--resume: the checkpoint is at epoch {}, beyond train.epochs = {}", from.epoch,
                cfg.train.epochs);
  if (from.epoch == cfg.train.epochs && from.epoch_step == 0 && r.changes.empty() &&
      fs::exists(results_file)) {
    std::ifstream in(results_file);
    summary.results = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!summary.results.is_discarded()) {
      summary.complete = true;
      spdlog::info("{}: the run is complete ({} epochs); results.json is kept", dir.string(),
                   from.epoch);
      return true;
    }
  }
  return false;
}

void record_run_failure(const fs::path& dir, const std::string& what) {
  try {
    write_text_atomic(dir / run_file::failure, what + "\n");
  } catch (const std::exception& note) {
    spdlog::warn("cannot record the failure in '{}': {}", dir.string(), note.what());
  }
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw_input("cannot write '{}': {}", path.string(), system_error());
    errno = 0;
    f << text;
    f.flush();
    if (!f) {
      const std::string why = system_error();
      f.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw_error("cannot write '{}': {}", path.string(), why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw_error("cannot rename '{}' to '{}'", tmp.string(), path.string());
  }
}

void append_line(const fs::path& path, const std::string& line) {
  errno = 0;
  std::ofstream f(path, std::ios::app);  // a failed open fails the writes (errno kept)
  f << line << '\n';
  f.flush();
  if (!f) throw_error("cannot append to '{}': {}", path.string(), system_error());
}

std::vector<nlohmann::json> keep_metrics_lines(const fs::path& path, int64_t last_epoch) {
  std::vector<nlohmann::json> epochs;
  std::ifstream in(path);
  if (!in) return epochs;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    // Per-epoch records carry "epoch"; a config change carries "after_epoch".
    const int64_t at =
        j.contains("epoch") ? j.value("epoch", int64_t{0}) : j.value("after_epoch", int64_t{0});
    if (at > last_epoch) continue;
    kept += line + "\n";
    if (j.contains("epoch")) epochs.push_back(std::move(j));
  }
  in.close();
  write_text_atomic(path, kept);
  return epochs;
}

}  // namespace xmc
