#include "train/run_files.h"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace xmc {
namespace fs = std::filesystem;

void prepare_run_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw_input("cannot create run directory '{}': {}", dir.string(),
                ec ? ec.message() : "not a directory");
  const fs::path probe = dir / (".write-test." + std::to_string(::getpid()));
  {
    std::ofstream f(probe);
    if (!f) throw_input("run directory '{}' is not writable", dir.string());
  }
  fs::remove(probe, ec);
}

void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) fs::remove(e.path(), ec);
  }
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw_input("cannot write '{}'", path.string());
    f << text;
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw_error("write to '{}' failed (disk full?)", tmp.string());
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
  std::ofstream f(path, std::ios::app);
  if (!f) throw_error("cannot append to '{}'", path.string());
  f << line << '\n';
  f.flush();
}

void keep_metrics_lines(const fs::path& path, int64_t last_epoch) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("epoch", int64_t{0}) <= last_epoch) kept += line + "\n";
  }
  in.close();
  write_text_atomic(path, kept);
}

}  // namespace xmc
