// compute/model/direct_expert_source.cpp: the cache-less expert source.
#include <algorithm>
#include <chrono>

#include "compute/model/expert_source.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice {

DirectExpertSource::DirectExpertSource(const Container& container, bool verify_crc)
    : container_(container), verify_crc_(verify_crc) {
  bool all_direct = !container.moe_layers().empty();
  for (const MoeLayerInfo& layer : container.moe_layers()) all_direct = all_direct && container.bank_direct(layer.layer);
  buffer_ = AlignedBuffer(container.largest_record_stride(), kRecordAlign);
  stats_.direct_io = all_direct;
}

void DirectExpertSource::request(uint32_t layer, std::span<const uint32_t> experts) {
  if (handed_out_ != experts_.size() || buffer_in_use_) {
    fail("expert source: layer {} requested before layer {} was consumed", layer, layer_);
  }
  container_.moe_layer(layer);  // throws when the layer has no experts
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  handed_out_ = 0;
  stats_.requests += experts.size();
}

LandedExpert DirectExpertSource::next() {
  if (handed_out_ >= experts_.size()) fail("expert source: layer {} has no record left to hand out", layer_);
  if (buffer_in_use_) fail("expert source: next() before the previous record was released");
  const auto start = std::chrono::steady_clock::now();
  const uint32_t expert = experts_[handed_out_];
  container_.read_record(layer_, expert, buffer_.data(), verify_crc_);
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.reads += 1;
  stats_.bytes_read += container_.moe_layer(layer_).record_stride;
  buffer_in_use_ = true;
  return LandedExpert{static_cast<uint32_t>(handed_out_++), buffer_.data()};
}

void DirectExpertSource::release(const LandedExpert&) { buffer_in_use_ = false; }

}  // namespace sluice
