#pragma once
// Helpers shared by the tests: temporary directories, running the xmctrain binary.
#include <filesystem>
#include <string>
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

// Runs the built xmctrain binary with the arguments (each shell-quoted), capturing
// stdout and stderr.
CliResult run_cli(const std::vector<std::string>& args);

}  // namespace xmc::test
