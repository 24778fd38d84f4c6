#pragma once
// Helpers shared by the tests: temporary directories, running the xmctrain binary.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace xmc::test {

// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Files (recursively) under the directory, relative names, sorted.
  std::vector<std::string> list() const;

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& p, const std::string& content);
std::string read_file(const std::filesystem::path& p);

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A small dense synthetic problem (3000 train / 1000 test points, 300 labels, 64 features)
// that `xmctrain train` generates into data_dir on first use; dense backend, Adam.
std::string small_train_config(const std::filesystem::path& data_dir, int epochs);

// Runs the built xmctrain binary with the arguments (each shell-quoted), capturing
// stdout and stderr; `env` adds environment variables (NAME, value) for this run only;
// `launcher` goes before the binary (e.g. mpirun -np 2).
CliResult run_cli(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env = {},
                  const std::vector<std::string>& launcher = {});

// The environment that makes writes to files whose path contains `path_part` fail with
// ENOSPC after `after_bytes` bytes (the LD_PRELOAD shim support/enospc_shim.c), for run_cli.
std::vector<std::pair<std::string, std::string>> disk_full_env(const std::string& path_part,
                                                               long long after_bytes = 0);

}  // namespace xmc::test
