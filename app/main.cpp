// xmctrain entry point: parses the command line, runs one subcommand, maps errors to exit
// codes (0 ok, 2 usage/config/input error, 1 other failure). Logs go to stderr.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "commands.h"
#include "core/blas_kernels.h"
#include "core/error.h"

namespace {

// Where OpenBLAS fell back to kernels below the CPU's (core/blas_kernels.h) and the user
// did not choose them (OPENBLAS_CORETYPE unset), runs this program again, same pid and
// arguments, with OPENBLAS_CORETYPE set to the better core: the library reads it only when
// it loads. XMC_BLAS_FALLBACK carries the detected core to the new process. Returns what
// to log once the logger is set up: the new process says what it runs (info), a failed
// exec, which carries on with the detected kernels, says so (warning); otherwise nothing.
struct BlasNote {
  std::string text;
  bool warning = false;
};
BlasNote restart_with_better_blas(char** argv) {
  if (const char* fallback = std::getenv("XMC_BLAS_FALLBACK")) {  // the restarted process
    const std::string note = fmt::format(
        "OpenBLAS did not recognise this CPU (it chose its {} kernels): running with "
        "OPENBLAS_CORETYPE={}; set OPENBLAS_CORETYPE to choose the kernels yourself",
        fallback, xmc::blas_kernels());
    unsetenv("XMC_BLAS_FALLBACK");
    return {note};
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return {};
  const std::string detected = xmc::blas_kernels();
  const std::string better = xmc::better_blas_kernels(detected, xmc::cpu_vector_isa());
  if (better.empty()) return {};
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv("XMC_BLAS_FALLBACK", detected.c_str(), 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("XMC_BLAS_FALLBACK");
  return {fmt::format("OpenBLAS did not recognise this CPU and runs its {} kernels, below "
                      "what the CPU supports; restarting with OPENBLAS_CORETYPE={} failed: "
                      "set it yourself",
                      detected, better),
          true};
}

}  // namespace

int main(int argc, char** argv) {
  const BlasNote blas_note = restart_with_better_blas(argv);
  CLI::App app{
      "xmctrain: train and evaluate output layers of extreme multi-label classifiers.\n"
      "Run 'xmctrain SUBCOMMAND --help' for the options of each subcommand."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "xmctrain 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "Log verbosity on stderr")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  using Register = xmc::app::Command (*)(CLI::App&);
  constexpr std::array<Register, 8> table = {xmc::app::register_train,   xmc::app::register_eval,
                                             xmc::app::register_predict, xmc::app::register_info,
                                             xmc::app::register_synth,   xmc::app::register_bench,
                                             xmc::app::register_report,  xmc::app::register_plan};
  std::vector<xmc::app::Command> commands;
  for (auto reg : table) commands.push_back(reg(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  auto logger = spdlog::stderr_color_mt("xmctrain");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!blas_note.text.empty())
    spdlog::log(blas_note.warning ? spdlog::level::warn : spdlog::level::info, "{}",
                blas_note.text);

  try {
    for (auto& c : commands)
      if (c.sub->parsed()) return c.run();
    return 2;
  } catch (const xmc::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
