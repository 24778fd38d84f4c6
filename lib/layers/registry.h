#pragma once
// The one table of output-layer backends (registry.cpp): name -> config type (for the
// config loader and the reference) and factory. An unknown name lists the known ones.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/output_types.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

struct OutputBackend {
  OutputTypeInfo config;
  std::function<std::unique_ptr<OutputLayer>(const LayerInit&, const OutputSpec&)> create;
};

// Backend `Layer` constructed as Layer(const LayerInit&, const Config&).
template <class Layer, class Config>
OutputBackend make_backend(std::string name, std::string description) {
  return {make_output_type<Config>(std::move(name), std::move(description)),
          [](const LayerInit& init, const OutputSpec& spec) -> std::unique_ptr<OutputLayer> {
            return std::make_unique<Layer>(init, spec.as<Config>());
          }};
}

const std::vector<OutputBackend>& output_backends();
// The config side of the table, for load_config() and the reference.
const std::vector<OutputTypeInfo>& output_types();
std::unique_ptr<OutputLayer> create_output_layer(const LayerInit& init, const OutputSpec& spec);

}  // namespace xmc
