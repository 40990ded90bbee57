// compute/model/mixer.cpp: which mixer a config asks for, and the plain
// segment-by-segment batched forward.
#include "compute/model/mixer.h"

namespace sluice {

void Mixer::forward_segments(uint32_t layer, const float* normed,
                             std::span<const MixerSegment> segments, uint32_t hidden, float* out) {
  size_t row = 0;
  for (const MixerSegment& s : segments) {
    forward(layer, normed + row * hidden, s.tokens, s.first_position, *s.state, out + row * hidden);
    row += s.tokens;
  }
}

std::unique_ptr<Mixer> make_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                  kernels::Exec exec) {
  switch (config.mixer) {
    case MixerKind::kGqa: return make_gqa_mixer(config, weights, context, exec);
    case MixerKind::kMla: return make_mla_mixer(config, weights, context, exec);
  }
  return nullptr;
}

}  // namespace sluice
