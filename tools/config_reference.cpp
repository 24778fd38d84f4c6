// Prints the config reference (Markdown) for the registered output types.
// Regenerate the committed doc with:
//   build/tools/config_reference > docs/config-reference.md
#include "config/config_reference.h"

#include <exception>
#include <iostream>

namespace {

// The output types documented in the reference.
// INTEGRATOR: return the registry's table (lib/layers/registry.h) here once it exists, then
// regenerate docs/config-reference.md; the config tests check that the doc is current.
std::vector<xmc::OutputTypeInfo> output_types() { return {}; }

}  // namespace

int main() {
  try {
    std::cout << xmc::config_reference_markdown(output_types());
    return std::cout ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
