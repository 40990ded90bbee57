// compute/convert/synth_values.h: the random contents of `sluice synth`:
// trunk values per tensor role, codebooks, expert record payloads and a
// byte-level tokenizer covering the whole vocabulary. Every value is a pure
// function of (seed, what, where), so the same seed gives the same bytes for
// any thread count or chunking. Scales keep activations finite and of order 1
// through every layer; nothing here is trained or meant to be meaningful.
#pragma once

#include <cstdint>
#include <string>

#include "compute/convert/convert_steps.h"
#include "compute/convert/routing_shape.h"
#include "proto/record_format.h"

namespace sluice::convert {

// Trunk tensors drawn by role: norms 1 ± 0.1, the router with logits about
// ±2, KDA's A_log ln U(1, 16) and dt_bias ±1, convolutions ±0.5, every other
// matrix uniform with standard deviation 0.02 (the tiny checkpoints' rules).
// With a routing shape, the embedding, LM head and routers are its rows,
// norms exactly 1, the selection bias 0, and the output projections that
// write the residual stream are scaled by kResidualScale.
class SynthTrunkValues final : public TrunkValues {
 public:
  explicit SynthTrunkValues(uint64_t seed, const RoutingShape* routing = nullptr)
      : seed_(seed), routing_(routing) {}
  void begin(const TrunkTensorPlan&) override {}
  void rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last, float* out) override;

 private:
  bool shaped_rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last, float* out) const;

  uint64_t seed_;
  const RoutingShape* routing_;
};

// The codebooks of one layer (kind-major, then stage), entry-major f32: stage
// s uniform in ±4^-s, inside the reader's bound of 4.
std::string synth_layer_codebooks(uint64_t seed, uint32_t layer);

// One expert's full record: random codes, row scales that give weights of
// standard deviation about 0.02 with synth_layer_codebooks (the down
// projection's times `down_scale`), padding rows codes 0 and scale 0, the
// header sealed with its crc32.
void synth_expert_record(const RecordLayout& layout, uint64_t seed, uint32_t layer, uint32_t expert,
                         uint32_t codebook_base, uint8_t* record, float down_scale = 1.0f);

// A byte-level BPE tokenizer.json with exactly `vocab` ids (256 bytes, then
// unreachable multi-byte tokens, so any id the model samples decodes) and
// its tokenizer_config.json.
std::string synth_tokenizer_json(uint32_t vocab);
std::string synth_tokenizer_config();

}  // namespace sluice::convert
