#pragma once
// Files of the run directory: creation with an early writability check, atomic text
// writes, metrics.jsonl maintenance.
#include <cstdint>
#include <filesystem>
#include <string>

namespace xmc {

// The files of a run directory; the trainer writes them, `xmctrain report` reads them.
namespace run_file {
inline constexpr const char* config = "config.resolved.yaml";  // written first
inline constexpr const char* metrics = "metrics.jsonl";        // one line per finished epoch
inline constexpr const char* checkpoint = "checkpoint.h5";     // last checkpointed epoch
inline constexpr const char* results = "results.json";         // written last: the run finished
inline constexpr const char* failure = "failed.txt";           // the error a run stopped on
}  // namespace run_file

// Creates the directory if needed and checks it is writable (InputError otherwise).
void prepare_run_directory(const std::filesystem::path& dir);
// Removes "<name>.tmp.<pid>" files that a killed run left behind.
void remove_stale_temporaries(const std::filesystem::path& dir);
// Writes to "<path>.tmp.<pid>", then renames (InputError when the path is unwritable).
void write_text_atomic(const std::filesystem::path& path, const std::string& text);
// Appends one line and flushes.
void append_line(const std::filesystem::path& path, const std::string& line);
// Keeps only the metrics lines of epochs <= last_epoch (resume after an interruption).
void keep_metrics_lines(const std::filesystem::path& path, int64_t last_epoch);

}  // namespace xmc
