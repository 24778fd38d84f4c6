#include "report/run_directory.h"

#include <glob.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "config/yaml_tree.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "io/file_util.h"
#include "train/run_files.h"

namespace xmc {
namespace fs = std::filesystem;

namespace {

// True when the directory holds any of the files a training run writes.
bool is_run_directory(const fs::path& dir) {
  std::error_code ec;
  return std::ranges::any_of(run_file_names(),
                             [&](const std::string& f) { return fs::exists(dir / f, ec); });
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand(const std::string& arg) {
  if (!has_glob_chars(arg)) {
    std::error_code ec;
    if (!fs::exists(arg, ec)) throw_input("report: '{}' does not exist", arg);
    return {arg};
  }
  glob_t g{};
  const int rc = ::glob(arg.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (out.empty()) throw_input("report: no file matches '{}'", arg);
  return out;  // glob sorts its matches
}

std::vector<fs::path> sorted_subdirectories(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The first line of a text, without trailing blanks.
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

void add_reason(RunRecord& r, const std::string& what) {
  r.reason += r.reason.empty() ? what : "; " + what;
}

}  // namespace

std::vector<fs::path> find_run_directories(const std::vector<std::string>& args) {
  std::vector<fs::path> out;
  std::set<fs::path> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    fs::path key = fs::weakly_canonical(p, ec);
    if (ec) key = p;
    if (seen.insert(key).second) out.push_back(p);
  };
  for (const auto& arg : args) {
    for (const auto& match : expand(arg)) {
      const fs::path p(match);
      std::error_code ec;
      if (!fs::is_directory(p, ec)) {
        spdlog::warn("report: '{}' is not a directory; skipped", match);
        continue;
      }
      if (is_run_directory(p)) {
        add(p);
        continue;
      }
      size_t found = 0;
      for (const auto& child : sorted_subdirectories(p))
        if (is_run_directory(child)) {
          add(child);
          ++found;
        }
      if (found == 0)
        spdlog::warn("report: '{}' holds no run files and no run directories; skipped", match);
    }
  }
  if (out.empty()) throw_input("report: no run directory found in {}", fmt::join(args, " "));
  return out;
}

RunRecord read_run_directory(const fs::path& dir) {
  RunRecord r;
  r.dir = dir.string();
  std::error_code ec;
  r.has_checkpoint = fs::exists(dir / run_file::checkpoint, ec);
  std::vector<std::string> unreadable;

  const fs::path config_file = dir / run_file::config;
  if (fs::exists(config_file, ec)) {
    try {
      const ConfigNode root =
          parse_yaml(io::read_whole_file(config_file.string()), config_file.string());
      r.config = flatten_config(root);
      r.has_config = true;
      if (const std::string* e = find_value(r.config, "train.epochs")) {
        try {
          r.planned_epochs = std::stoll(*e);
        } catch (const std::exception&) {
          r.planned_epochs = 0;
        }
      }
    } catch (const std::exception& e) {
      unreadable.emplace_back(e.what());
    }
  }

  const fs::path metrics_file = dir / run_file::metrics;
  if (fs::exists(metrics_file, ec)) {
    try {
      std::istringstream in(io::read_whole_file(metrics_file.string()));
      std::string line;
      std::vector<int64_t> bad_lines;
      for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object())
          bad_lines.push_back(line_no);
        else if (!j.contains("config_change"))  // --allow-config-change's record: no epoch
          r.epochs.push_back(std::move(j));
      }
      // A run killed while appending leaves a cut last line: noted, not fatal.
      if (!bad_lines.empty())
        add_reason(r, fmt::format("{}: line {} is not a JSON object (skipped)",
                                  metrics_file.string(), fmt::join(bad_lines, ", ")));
    } catch (const std::exception& e) {
      unreadable.emplace_back(e.what());
    }
  }

  const fs::path results_file = dir / run_file::results;
  const bool has_results = fs::exists(results_file, ec);
  if (has_results) {
    try {
      r.results = nlohmann::json::parse(io::read_whole_file(results_file.string()));
      if (!r.results.is_object()) {
        unreadable.push_back(fmt::format("{}: not a JSON object", results_file.string()));
        r.results = nullptr;
      }
    } catch (const std::exception& e) {
      unreadable.push_back(fmt::format("{}: {}", results_file.string(), e.what()));
    }
  }

  const fs::path failure_file = dir / run_file::failure;
  const std::string planned = r.planned_epochs > 0 ? std::to_string(r.planned_epochs) : "?";
  std::string status_reason;
  if (fs::exists(failure_file, ec)) {
    r.status = RunStatus::failed;
    std::string msg;
    try {
      msg = first_line(io::read_whole_file(failure_file.string()));
    } catch (const std::exception& e) {
      msg = e.what();
    }
    status_reason = msg.empty() ? fmt::format("{} is empty", failure_file.string()) : msg;
  } else if (!unreadable.empty()) {
    r.status = RunStatus::unreadable;
    status_reason = fmt::format("{}", fmt::join(unreadable, "; "));
    unreadable.clear();
  } else if (has_results) {
    r.status = RunStatus::complete;
  } else if (run_directory_in_use(dir)) {
    r.status = RunStatus::running;
    status_reason = fmt::format("a train command is running in it: {} of {} epochs done",
                                r.epochs.size(), planned);
  } else {
    r.status = RunStatus::incomplete;
    const std::string resume =
        r.has_checkpoint
            ? fmt::format("{} present (train --resume continues it)", run_file::checkpoint)
            : std::string("no checkpoint (train it again)");
    status_reason = fmt::format(
        "no {} and no train command running in it: killed or interrupted after {} of {} epochs; {}",
        run_file::results, r.epochs.size(), planned, resume);
  }
  if (!unreadable.empty()) add_reason(r, fmt::format("{}", fmt::join(unreadable, "; ")));
  if (!status_reason.empty())
    r.reason = r.reason.empty() ? status_reason : status_reason + "; " + r.reason;
  return r;
}

}  // namespace xmc
