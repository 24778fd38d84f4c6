#include "support/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "support/test_env.h"

namespace xmc::test {
namespace fs = std::filesystem;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("xmctest-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> TempDir::list() const {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(path_))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), path_).string());
  std::sort(out.begin(), out.end());
  return out;
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + p.string());
  f << content;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string small_train_config(const fs::path& data_dir, int epochs) {
  return "name: e2e\nseed: 7\ndevice: cpu\nthreads: 2\n"
         "data:\n"
         "  train: {features: " + (data_dir / "trn_X.npy").string() +
         ", labels: " + (data_dir / "trn_X_Y.txt").string() + "}\n"
         "  test: {features: " + (data_dir / "tst_X.npy").string() +
         ", labels: " + (data_dir / "tst_X_Y.txt").string() + "}\n"
         "  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 300, "
         "features: 64, clusters: 20, seed: 3}\n"
         "model:\n"
         "  encoder: [{type: linear, out: 64, activation: relu, dropout: 0.1}]\n"
         "  output: {type: dense, loss: bce, chunk_size: 128}\n"
         "optim:\n"
         "  encoder: {type: adam, lr: 0.01}\n"
         "  output: {type: adam, lr: 0.01}\n"
         "train: {epochs: " + std::to_string(epochs) + ", batch_size: 128, log_every_s: 100}\n"
         "eval: {k: 5}\n";
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('\'');
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}
}  // namespace

bool has_raw_binary(const std::string& message) {
  return std::any_of(message.begin(), message.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\n') || u >= 0x7f;
  });
}

ScopedEnv::ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
  if (const char* v = std::getenv(name_.c_str())) {
    had_ = true;
    old_ = v;
  }
  ::setenv(name_.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (had_)
    ::setenv(name_.c_str(), old_.c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

CliResult run_cli(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env,
                  const std::vector<std::string>& launcher) {
  TempDir tmp;
  std::string cmd;
  if (!env.empty()) {
    cmd = "env";
    for (const auto& [name, value] : env) cmd.append(" ").append(shell_quote(name + "=" + value));
    cmd.append(" ");
  }
  for (const auto& l : launcher) cmd.append(shell_quote(l)).append(" ");
  cmd.append(shell_quote(XMC_BINARY));
  for (auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >").append(shell_quote((tmp / "out").string()));
  cmd.append(" 2>").append(shell_quote((tmp / "err").string()));
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(tmp / "out");
  r.err = read_file(tmp / "err");
  return r;
}

std::vector<std::pair<std::string, std::string>> disk_full_env(const std::string& path_part,
                                                               long long after_bytes) {
  // verify_asan_link_order=0: under ASan the shim is loaded before the ASan runtime.
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::string asan_options = "verify_asan_link_order=0";
  if (asan != nullptr && asan[0] != '\0') asan_options = std::string(asan) + ":" + asan_options;
  return {{"LD_PRELOAD", XMC_ENOSPC_SHIM},
          {"XMC_ENOSPC_PATH", path_part},
          {"XMC_ENOSPC_AFTER", std::to_string(after_bytes)},
          {"ASAN_OPTIONS", asan_options}};
}

}  // namespace xmc::test
