// compute/model/sequence_state.cpp: sizing a sequence's state and copying
// the used part of it out and back. Never reads past a snapshot's floats.
#include "compute/model/sequence_state.h"

#include <algorithm>

#include "proto/error.h"

namespace sluice {

MixerState::MixerState(uint32_t slots, uint32_t context, uint32_t row_floats, size_t fixed_floats)
    : slots_(slots),
      context_(context),
      row_floats_(row_floats),
      rows_(size_t{slots} * context * row_floats),
      fixed_(fixed_floats) {}

void MixerState::save(uint32_t position, std::vector<float>& out) const {
  const size_t used = size_t{position} * row_floats_;
  for (uint32_t slot = 0; slot < slots_; ++slot) {
    const auto first =
        rows_.begin() + static_cast<std::ptrdiff_t>(size_t{slot} * context_ * row_floats_);
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(used));
  }
  out.insert(out.end(), fixed_.begin(), fixed_.end());
}

std::span<const float> MixerState::load(uint32_t position, std::span<const float> in) {
  if (slots_ > 0 && position > context_)
    fail("a state at position {} does not fit a context of {}", position, context_);
  if (in.size() < used_floats(position)) fail("a state at position {} is cut short", position);
  const size_t used = size_t{position} * row_floats_;
  for (uint32_t slot = 0; slot < slots_; ++slot) {
    std::copy_n(in.begin(), used,
                rows_.begin() + static_cast<std::ptrdiff_t>(size_t{slot} * context_ * row_floats_));
    in = in.subspan(used);
  }
  std::copy_n(in.begin(), fixed_.size(), fixed_.begin());
  return in.subspan(fixed_.size());
}

SequenceState::SequenceState(MixerState attention, MixerState kda, uint32_t context)
    : attention_(std::move(attention)), kda_(std::move(kda)), context_(context) {}

SequenceSnapshot SequenceState::snapshot() const {
  SequenceSnapshot out;
  out.tokens = tokens_;
  out.state.reserve(snapshot_floats(position()));
  attention_.save(position(), out.state);
  kda_.save(position(), out.state);
  return out;
}

void SequenceState::restore(const SequenceSnapshot& snapshot) {
  if (snapshot.tokens.size() > context_) {
    fail("a snapshot of {} tokens does not fit the context of {} (raise --ctx)",
         snapshot.tokens.size(), context_);
  }
  const auto position = static_cast<uint32_t>(snapshot.tokens.size());
  if (snapshot.state.size() != snapshot_floats(position)) {
    fail("a snapshot at position {} holds {} state values where this model's state has {}",
         position, snapshot.state.size(), snapshot_floats(position));
  }
  std::span<const float> rest = attention_.load(position, snapshot.state);
  kda_.load(position, rest);
  tokens_ = snapshot.tokens;
}

}  // namespace sluice
