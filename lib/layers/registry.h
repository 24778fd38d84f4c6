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
  // The analytic bytes of the layer `create` would build for this shape, without building
  // it (Layer::planned_bytes; what its analytic_bytes() returns once built).
  std::function<LayerBytes(const LayerShape&, const OutputSpec&)> planned_bytes;
  // The work of one training step of that layer (Layer::planned_step).
  std::function<StepWork(const LayerShape&, const OutputSpec&)> planned_step;
  // The layer runs on a CUDA Context (device views, see output_layer.h). A backend
  // without it is refused on device cuda (never a silent CPU fallback).
  bool cuda = false;
};

// Backend `Layer` constructed as Layer(const LayerInit&, const Config&), with a static
// Layer::planned_bytes and Layer::planned_step(const LayerShape&, const Config&).
template <class Layer, class Config>
OutputBackend make_backend(std::string name, std::string description, bool cuda = false) {
  return {make_output_type<Config>(std::move(name), std::move(description)),
          [](const LayerInit& init, const OutputSpec& spec) -> std::unique_ptr<OutputLayer> {
            return std::make_unique<Layer>(init, spec.as<Config>());
          },
          [](const LayerShape& shape, const OutputSpec& spec) {
            return Layer::planned_bytes(shape, spec.as<Config>());
          },
          [](const LayerShape& shape, const OutputSpec& spec) {
            return Layer::planned_step(shape, spec.as<Config>());
          },
          cuda};
}

const std::vector<OutputBackend>& output_backends();
// The config side of the table, for load_config() and the reference.
const std::vector<OutputTypeInfo>& output_types();
// Whether backend `name` has a CUDA path (false for an unknown name).
bool backend_has_cuda(const std::string& name);
// The backend of this name (InputError listing the known ones for an unknown name).
const OutputBackend& find_output_backend(const std::string& name);
// Builds the backend; InputError when the Context is CUDA and the backend has no CUDA path.
std::unique_ptr<OutputLayer> create_output_layer(const LayerInit& init, const OutputSpec& spec);

}  // namespace xmc
