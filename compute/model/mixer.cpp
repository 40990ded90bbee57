// compute/model/mixer.cpp: which mixer a config asks for.
#include "compute/model/mixer.h"

namespace sluice {

std::unique_ptr<Mixer> make_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                  kernels::Exec exec) {
  switch (config.mixer) {
    case MixerKind::kGqa: return make_gqa_mixer(config, weights, context, exec);
    case MixerKind::kMla: return make_mla_mixer(config, weights, context, exec);
  }
  return nullptr;
}

}  // namespace sluice
