// compute/model/sequence_state.h: everything one sequence carries between
// forward passes (each mixer's per-layer caches and recurrent state, the
// tokens run so far) and its snapshots. Holds no weights and computes
// nothing: the mixers read and write it, Transformer::forward advances it.
#pragma once

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

// A sequence's whole state at its position, as a value: cheap to keep (only
// the used rows), restorable into any SequenceState of the same model whose
// context holds it. The position is tokens.size().
struct SequenceSnapshot {
  std::vector<int32_t> tokens;
  std::vector<float> state;  // the softmax-attention mixer's part, then KDA's
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
  void reset() { tokens_.clear(); }

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
};

}  // namespace sluice
