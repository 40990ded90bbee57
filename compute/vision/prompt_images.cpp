// compute/vision/prompt_images.cpp: data: URLs, content digests, pad
// expansion and the lazily loaded tower behind prompt_images.h. A URL is
// only ever decoded from the request's own bytes; nothing here opens a path
// a message carries.
#include "compute/vision/prompt_images.h"

#include <fmt/format.h>
#include <nettle/sha2.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "proto/base64.h"
#include "proto/error.h"

namespace sluice {
namespace {

using json = nlohmann::ordered_json;

ImageDigest content_digest(const DecodedImage& image) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  const uint32_t size[2] = {image.width, image.height};
  sha256_update(&ctx, sizeof(size), reinterpret_cast<const uint8_t*>(size));
  sha256_update(&ctx, image.rgb.size(), image.rgb.data());
  ImageDigest digest;
  sha256_digest(&ctx, digest.size(), digest.data());
  return digest;
}

// The media type a data: URL names for a file, from its extension.
std::string media_type_of(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".png" || ext == ".bmp" || ext == ".gif" || ext == ".tga")
    return "image/" + ext.substr(1);
  if (ext == ".psd") return "image/vnd.adobe.photoshop";
  return "image/unknown";  // stb_image reads the bytes, not the name
}

}  // namespace

PromptImage prepare_image(DecodedImage image, const VisionConfig& config) {
  PromptImage out;
  out.grid = grid_for_image(image.width, image.height, config.patch);
  out.digest = content_digest(image);
  out.image = std::move(image);
  return out;
}

DecodedImage image_of_part(const json& part, const std::string& where, uint64_t max_pixels) {
  const json* url = nullptr;
  std::string at = where + ".image_url";
  if (part.contains("image_url") && part["image_url"].is_string()) {
    url = &part["image_url"];
  } else if (part.contains("image_url") && part["image_url"].is_object() &&
             part["image_url"].contains("url")) {
    url = &part["image_url"]["url"];
    at += ".url";
  }
  if (!url || !url->is_string())
    fail("{}: expected {{\"url\": \"data:image/...;base64,...\"}}", at);
  const std::string& text = url->get_ref<const std::string&>();
  if (text.starts_with("http://") || text.starts_with("https://")) {
    fail(
        "{}: an http(s) URL; this server is offline and fetches nothing: send the image inline "
        "as data:image/...;base64,...",
        at);
  }
  if (!text.starts_with("data:")) {
    fail("{}: not a data: URL; images come inline as data:image/...;base64,... (no file is read)",
         at);
  }
  const size_t comma = text.find(',');
  const std::string_view header = std::string_view(text).substr(0, comma);
  if (comma == std::string::npos || !header.starts_with("data:image/") ||
      !header.ends_with(";base64")) {
    fail("{}: a data: URL must be data:image/TYPE;base64,DATA", at);
  }
  std::string why;
  const std::optional<std::string> bytes =
      decode_base64(std::string_view(text).substr(comma + 1), {.padding_required = false, .url_safe_too = true}, &why);
  if (!bytes) fail("{}: the base64 data after the comma: {}", at, why);
  return decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), at, max_pixels);
}

std::string image_file_data_url(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("{}: cannot open the image", path);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxImageFileBytes)
    fail("{}: the image file is over {} bytes", path, kMaxImageFileBytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size))
    fail("{}: cannot read the image", path);
  decode_image(bytes, path);  // refused here, by its name, rather than later as a URL
  return fmt::format("data:{};base64,{}", media_type_of(path), encode_base64(bytes));
}

json image_file_part(const std::string& path) {
  return {{"type", "image_url"}, {"image_url", {{"url", image_file_data_url(path)}}}};
}

chat::ImageResolver PromptImageSet::resolver() {
  return [this](const json& part, size_t index, const std::string& where) {
    if (index != images_.size())
      fail("{}: image {} resolved out of order (after {})", where, index, images_.size());
    images_.push_back(prepare_image(image_of_part(part, where, max_pixels_ - pixels_), config_));
    const PromptImage& image = images_.back();
    pixels_ += uint64_t{image.image.width} * image.image.height;
    return chat::ImagePlacement{image.image.width, image.image.height, image.positions()};
  };
}

ExpandedPrompt expand_media(std::span<const int32_t> ids, int32_t pad,
                            std::span<const PromptImage> images) {
  const auto pads = static_cast<size_t>(std::count(ids.begin(), ids.end(), pad));
  if (pads != images.size())
    fail("the prompt has {} media pad tokens (id {}) for {} images: one each", pads, pad,
         images.size());
  ExpandedPrompt out;
  size_t next = 0;
  for (const int32_t id : ids) {
    if (id != pad) {
      out.tokens.push_back(id);
      continue;
    }
    const PromptImage& image = images[next++];
    out.media.push_back(
        {static_cast<uint32_t>(out.tokens.size()), image.positions(), image.digest});
    out.tokens.insert(out.tokens.end(), image.positions(), pad);
  }
  return out;
}

std::vector<MediaRun> media_from(std::span<const MediaRun> media, size_t from) {
  std::vector<MediaRun> out;
  for (const MediaRun& run : media)
    if (run.first >= from) out.push_back(run);
  return out;
}

std::vector<float> media_rows_from(
    const ExpandedPrompt& prompt, size_t from, uint32_t hidden,
    const std::function<const std::vector<float>&(size_t)>& rows_of) {
  std::vector<float> out;
  for (size_t i = 0; i < prompt.media.size(); ++i) {
    const MediaRun& run = prompt.media[i];
    if (run.first + run.length <= from) continue;
    const std::vector<float>& rows = rows_of(i);
    if (rows.size() != size_t{run.length} * hidden)
      fail("image {} has {} values of rows for {} positions of width {}", i, rows.size(),
           run.length, hidden);
    const size_t skip = from > run.first ? from - run.first : 0;
    out.insert(out.end(), rows.begin() + static_cast<std::ptrdiff_t>(skip * hidden), rows.end());
  }
  return out;
}

ImageEncoder::ImageEncoder(const Container& container, const ModelConfig& config,
                           kernels::Exec exec)
    : container_(container), config_(config), exec_(exec) {
  if (!config.vision) {
    fail(
        "{}: the model has no vision tower (its config has no vision_config), so it cannot take "
        "images",
        container.dir());
  }
}

ImageEncoder::~ImageEncoder() = default;

std::vector<float> ImageEncoder::encode(const PromptImage& image) {
  if (!tower_) {
    weights_ = std::make_unique<VisionWeights>(VisionWeights::load(container_, config_));
    tower_ = std::make_unique<VisionTower>(*config_.vision, *weights_, exec_);
  }
  ++tower_runs_;
  return tower_->encode(image_pixels(image.image, image.grid, config_.vision->patch), image.grid);
}

}  // namespace sluice
