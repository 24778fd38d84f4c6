#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_train(CLI::App& app) {
  auto* sub = app.add_subcommand("train", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain train' is not implemented yet"); }};
}

}  // namespace xmc::app
