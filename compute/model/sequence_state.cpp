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

bool holds_prefix(std::span<const int32_t> held, std::span<const MediaRun> held_media,
                  std::span<const int32_t> tokens, std::span<const MediaRun> media) {
  if (held.empty() || held.size() >= tokens.size() ||
      !std::equal(held.begin(), held.end(), tokens.begin()))
    return false;
  auto started = [&](std::span<const MediaRun> runs) {
    std::vector<MediaRun> out;
    for (const MediaRun& run : runs)
      if (run.first < held.size()) out.push_back(run);
    return out;
  };
  return started(held_media) == started(media);
}

void SequenceState::note_media(std::span<const MediaRun> runs) {
  std::erase_if(media_, [&](const MediaRun& run) { return run.first >= position(); });
  for (const MediaRun& run : runs) {
    const uint32_t after = media_.empty() ? 0 : media_.back().first + media_.back().length;
    if (run.length == 0 || run.first < after || run.first < position() ||
        uint64_t{run.first} + run.length > context_) {
      fail(
          "an image run at positions {}..+{} does not follow the sequence's images (up to {}) "
          "and position {} within the context of {}",
          run.first, run.length, after, position(), context_);
    }
    media_.push_back(run);
  }
}

SequenceSnapshot SequenceState::snapshot() const {
  SequenceSnapshot out;
  out.tokens = tokens_;
  for (const MediaRun& run : media_)
    if (run.first < position()) out.media.push_back(run);
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
  uint32_t after = 0;
  for (const MediaRun& run : snapshot.media) {
    if (run.length == 0 || run.first < after || run.first >= position ||
        uint64_t{run.first} + run.length > context_) {
      fail("a snapshot at position {} has an image run at {}..+{} out of order or outside it",
           position, run.first, run.length);
    }
    after = run.first + run.length;
  }
  std::span<const float> rest = attention_.load(position, snapshot.state);
  kda_.load(position, rest);
  tokens_ = snapshot.tokens;
  media_ = snapshot.media;
}

}  // namespace sluice
