#pragma once
// Each subcommand registers its options on the parent app and returns the action to run
// when it was selected. main.cpp holds the one table of subcommands.
#include <CLI/CLI.hpp>

#include <functional>

namespace xmc::app {

struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;  // returns the exit code; throws xmc errors
};

Command register_train(CLI::App& app);
Command register_eval(CLI::App& app);
Command register_predict(CLI::App& app);
Command register_info(CLI::App& app);
Command register_synth(CLI::App& app);
Command register_bench(CLI::App& app);
Command register_report(CLI::App& app);
Command register_plan(CLI::App& app);

}  // namespace xmc::app
