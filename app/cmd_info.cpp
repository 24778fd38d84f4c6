#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_info(CLI::App& app) {
  auto* sub = app.add_subcommand("info", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain info' is not implemented yet"); }};
}

}  // namespace xmc::app
