#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_synth(CLI::App& app) {
  auto* sub = app.add_subcommand("synth", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain synth' is not implemented yet"); }};
}

}  // namespace xmc::app
