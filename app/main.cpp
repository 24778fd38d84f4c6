// xmctrain entry point: parses the command line, runs one subcommand, maps errors to exit
// codes (0 ok, 2 usage/config/input error, 1 other failure). Logs go to stderr.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <exception>
#include <iostream>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
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
