// compute/vision/prompt_images.h: the images of a rendered prompt (chat and
// serve): image parts read from data: URLs, each identified by its content,
// the prompt's pads expanded to their positions, and the tower run only for
// images whose positions still need prefilling. It never reads a file or URL
// a message names, and never runs the tower for an image the sequence holds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "compute/chat/chat_template.h"
#include "compute/kernels/dispatch.h"
#include "compute/model/sequence_state.h"
#include "compute/vision/image_input.h"
#include "compute/vision/vision_tower.h"
#include "proto/container.h"
#include "proto/model_config.h"

namespace sluice {

using ImageDigest = std::array<uint8_t, 32>;

// One image of a prompt, decoded and sized but not encoded.
struct PromptImage {
  DecodedImage image;
  PatchGrid grid;
  ImageDigest digest{};  // SHA-256 of the width, height and RGB pixels
  uint32_t positions() const { return grid.tokens(); }
};

PromptImage prepare_image(DecodedImage image, const VisionConfig& config);

// The image of an OpenAI content part, {"type": "image_url", "image_url":
// {"url": URL}} (or "image_url": URL), where URL is
// data:image/TYPE;base64,DATA. An http(s) URL, a path or anything else is
// refused (Error "WHERE.image_url.url: ..."): nothing is fetched or read.
// An image over `max_pixels` is refused before it is decoded.
DecodedImage image_of_part(const nlohmann::ordered_json& part, const std::string& where,
                           uint64_t max_pixels = kMaxImagePixels);

// A data: URL holding the file's bytes, for a conversation that names an
// image by its file (chat's --image and /image). Throws Error naming it.
std::string image_file_data_url(const std::string& path);
// The content part holding that URL.
nlohmann::ordered_json image_file_part(const std::string& path);

// Gathers the images a render resolves, in prompt order. All of them
// together hold at most `max_pixels` (kMaxImagePixels), so a small request
// of highly compressed images cannot make the server decode gigabytes.
class PromptImageSet {
 public:
  explicit PromptImageSet(const VisionConfig& config, uint64_t max_pixels = kMaxImagePixels)
      : config_(config), max_pixels_(max_pixels) {}
  // The resolver for chat::ChatInput::images; it adds to this set, which must outlive it.
  chat::ImageResolver resolver();
  std::vector<PromptImage>& images() { return images_; }

 private:
  VisionConfig config_;
  std::vector<PromptImage> images_;
  uint64_t max_pixels_;
  uint64_t pixels_ = 0;
};

// A prompt's ids with each image's single pad expanded to its positions,
// and where each image sits (MediaRun, in order).
struct ExpandedPrompt {
  std::vector<int32_t> tokens;
  std::vector<MediaRun> media;
};
// Throws Error when the prompt's pads are not one per image.
ExpandedPrompt expand_media(std::span<const int32_t> ids, int32_t pad,
                            std::span<const PromptImage> images);

// The runs of `media` that start at or after `from` (what a sequence at
// position `from` notes before running the rest of the prompt).
std::vector<MediaRun> media_from(std::span<const MediaRun> media, size_t from);

// The input embeddings of the pads at positions [from, end) of `prompt`, in
// order: image i's rows (from `rows_of(i)`), or the tail of them for an
// image the sequence already holds in part. Empty when no pad is there.
std::vector<float> media_rows_from(const ExpandedPrompt& prompt, size_t from, uint32_t hidden,
                                   const std::function<const std::vector<float>&(size_t)>& rows_of);

// The vision tower of one model, loaded at the first image it encodes, and
// how many images it has encoded (each costs a whole tower pass).
class ImageEncoder {
 public:
  // `container` must outlive the encoder. Throws Error naming the container
  // when the model has no vision tower.
  ImageEncoder(const Container& container, const ModelConfig& config, kernels::Exec exec);
  ~ImageEncoder();
  std::vector<float> encode(const PromptImage& image);
  uint64_t tower_runs() const { return tower_runs_; }

 private:
  const Container& container_;
  const ModelConfig& config_;
  kernels::Exec exec_;
  std::unique_ptr<VisionWeights> weights_;
  std::unique_ptr<VisionTower> tower_;
  uint64_t tower_runs_ = 0;
};

}  // namespace sluice
