// compute/model/sequence_state.h: everything one sequence carries between
// forward passes (each mixer's per-layer caches and recurrent state, the
// tokens run so far) and its snapshots. Holds no weights and computes
// nothing: the mixers read and write it, Transformer::forward advances it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

// One mixer's part of a sequence: per layer it serves (a slot), one row of
// `row_floats` for each position [0, context) (a KV cache, a latent cache),
// and a part that does not grow with position (KDA's recurrent and
// convolution state). Rows at or past the sequence's position are garbage.
class MixerState {
 public:
  MixerState() = default;
  MixerState(uint32_t slots, uint32_t context, uint32_t row_floats, size_t fixed_floats);

  float* row(uint32_t slot, uint32_t position) {
    return &rows_[(size_t{slot} * context_ + position) * row_floats_];
  }
  std::span<float> fixed() { return fixed_; }
  uint32_t slots() const { return slots_; }
  uint32_t context() const { return context_; }
  uint32_t row_floats() const { return row_floats_; }
  size_t bytes() const { return (rows_.size() + fixed_.size()) * sizeof(float); }

  // What holds positions [0, position): the used rows of every slot, then
  // the fixed part.
  size_t used_floats(uint32_t position) const {
    return size_t{slots_} * position * row_floats_ + fixed_.size();
  }
  void save(uint32_t position, std::vector<float>& out) const;
  // Reads used_floats(position) values from `in`; returns the rest of `in`.
  std::span<const float> load(uint32_t position, std::span<const float> in);

 private:
  uint32_t slots_ = 0;
  uint32_t context_ = 0;
  uint32_t row_floats_ = 0;
  std::vector<float> rows_;  // [slot][position][row_floats]
  std::vector<float> fixed_;
};

// An image's place in a sequence: `length` media pad positions from
// `first`, whose input embeddings came from the image whose content hashes to
// `digest` (SHA-256 of its size and pixels). Two prompts whose ids agree
// still differ where their images do: a pad run of equal length looks alike.
struct MediaRun {
  uint32_t first = 0, length = 0;
  std::array<uint8_t, 32> digest{};
  bool operator==(const MediaRun&) const = default;
};

// Whether a sequence holding `held` (with images `held_media`) can be
// extended into `tokens` (with images `media`): `held` is a strict, non-empty
// prefix of `tokens`, and the images that start inside it are the same
// images at the same places in both.
bool holds_prefix(std::span<const int32_t> held, std::span<const MediaRun> held_media,
                  std::span<const int32_t> tokens, std::span<const MediaRun> media);

// A sequence's whole state at its position, as a value: cheap to keep (only
// the used rows), restorable into any SequenceState of the same model whose
// context holds it. The position is tokens.size().
struct SequenceSnapshot {
  std::vector<int32_t> tokens;
  std::vector<float> state;     // the softmax-attention mixer's part, then KDA's
  std::vector<MediaRun> media;  // the images that start before the position, in order
};

class SequenceState {
 public:
  SequenceState(MixerState attention, MixerState kda, uint32_t context);

  // Tokens run so far; the next token goes at position().
  uint32_t position() const { return static_cast<uint32_t>(tokens_.size()); }
  uint32_t context() const { return context_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  size_t bytes() const { return attention_.bytes() + kda_.bytes(); }

  // Back to position 0 (the mixers clear a recurrent state when a sequence
  // starts at 0, so nothing needs zeroing here).
  void reset() {
    tokens_.clear();
    media_.clear();
  }

  // The images of the positions run so far (and of those about to run).
  // The caller notes the images of the tokens it is about to run; runs noted
  // at or past the position before (a prefill that was stopped) are dropped,
  // so the list never names positions the sequence ran with other inputs.
  void note_media(std::span<const MediaRun> runs);
  std::span<const MediaRun> media() const { return media_; }
  // holds_prefix() of this sequence's tokens and images.
  bool is_prefix_of(std::span<const int32_t> tokens, std::span<const MediaRun> media) const {
    return holds_prefix(tokens_, media_, tokens, media);
  }

  // Floats a snapshot at `position` holds.
  size_t snapshot_floats(uint32_t position) const {
    return attention_.used_floats(position) + kda_.used_floats(position);
  }
  SequenceSnapshot snapshot() const;
  // Throws Error when the snapshot does not fit this state (another shape,
  // a position past the context, a size that does not match).
  void restore(const SequenceSnapshot& snapshot);

  MixerState& attention() { return attention_; }
  MixerState& kda() { return kda_; }
  // Called by the transformer once a chunk has run.
  void advance(std::span<const int32_t> tokens) {
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  }

 private:
  MixerState attention_;  // the GQA or MLA layers
  MixerState kda_;        // the KDA layers (empty without any)
  uint32_t context_;
  std::vector<int32_t> tokens_;
  std::vector<MediaRun> media_;  // ordered by first, not overlapping
};

}  // namespace sluice
