#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_predict(CLI::App& app) {
  auto* sub = app.add_subcommand("predict", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain predict' is not implemented yet"); }};
}

}  // namespace xmc::app
