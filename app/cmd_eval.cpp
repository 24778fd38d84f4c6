#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain eval' is not implemented yet"); }};
}

}  // namespace xmc::app
