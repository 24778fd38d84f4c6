#include "layers/registry.h"

#include "layers/anns_sampled.h"
#include "layers/bottleneck.h"
#include "layers/dense.h"
#include "layers/lsh_sampled.h"
#include "layers/fixed_fanin.h"
#include "layers/group_shared.h"

namespace xmc {

const std::vector<OutputBackend>& output_backends() {
  static const std::vector<OutputBackend> table = {
      make_backend<DenseLayer, DenseConfig>("dense", "Full one-vs-all layer W[L×d] + bias",
                                            /*cuda=*/true),
      make_backend<BottleneckLayer, BottleneckConfig>(
          "bottleneck", "Projection d→b, then a dense layer over b (memory-matched baseline)",
          /*cuda=*/true),
      make_backend<LshSampledLayer, LshSampledConfig>(
          "lsh_sampled", "LSH tables over label weights give adaptive hard negatives (LNS, SLIDE)",
          /*cuda=*/true),
      make_backend<AnnsSampledLayer, AnnsSampledConfig>(
          "anns_sampled", "ASTRA: HNSW over classifier vectors, stale hard + uniform negatives",
          /*cuda=*/true),
      make_backend<FixedFaninLayer, FixedFaninConfig>(
          "fixed_fanin", "Constant fan-in sparse layer [L×F] with prune-and-regrow (Schultheis & Babbar 2023)",
          /*cuda=*/true),
      make_backend<GroupSharedLayer, GroupSharedConfig>(
          "group_shared", "HASTE: groups of G tail labels share one fan-in set; dense head over frequent labels",
          /*cuda=*/true),
  };
  return table;
}

const std::vector<OutputTypeInfo>& output_types() {
  static const std::vector<OutputTypeInfo> types = [] {
    std::vector<OutputTypeInfo> out;
    for (const auto& b : output_backends()) out.push_back(b.config);
    return out;
  }();
  return types;
}

const OutputBackend& find_output_backend(const std::string& name) {
  for (const auto& b : output_backends())
    if (b.config.name == name) return b;
  (void)find_output_type(output_types(), name);  // the config loader's message
  throw_error("output type '{}' is registered without a factory", name);
}

bool backend_has_cuda(const std::string& name) {
  for (const auto& b : output_backends())
    if (b.config.name == name) return b.cuda;
  return false;
}

std::unique_ptr<OutputLayer> create_output_layer(const LayerInit& init, const OutputSpec& spec) {
  const OutputBackend& b = find_output_backend(spec.type);
  if (init.ctx->on_gpu() && !b.cuda)
    throw_input("model.output.type '{}' has no CUDA path yet: use device cpu (--device cpu)",
                spec.type);
  auto layer = b.create(init, spec);
  XMC_CHECK(layer->label_lo() == init.label_lo && layer->label_hi() == init.label_end(),
            "output '{}' built over labels [{}, {}), asked for [{}, {})", spec.type,
            layer->label_lo(), layer->label_hi(), init.label_lo, init.label_end());
  return layer;
}

}  // namespace xmc
