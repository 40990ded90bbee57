// compute/cli/image_prompt.cpp: loading the tower for a prompt's images and
// expanding their pads. Never encodes an image twice, never loads the tower
// for a prompt without images.
#include "compute/cli/image_prompt.h"

#include <fmt/format.h>

#include <algorithm>

#include "compute/vision/image_input.h"
#include "compute/vision/prompt_images.h"
#include "proto/error.h"

namespace sluice::cli {

void add_image_flag(CLI::App& cmd, std::vector<std::string>& files) {
  cmd.add_option(
      "--image", files,
      "an image file (JPEG, PNG, BMP, GIF, PSD, TGA) for a model with a vision tower (Kimi K3); "
      "repeatable. Each takes the place of one media pad of --prompt-ids, or its media block "
      "goes before the prompt");
}

ImagePrompt place_images(Engine& engine, const tokenizer::Tokenizer& tok,
                         std::vector<int32_t> prompt, const std::vector<std::string>& files) {
  ImagePrompt placed;
  if (files.empty()) {
    placed.tokens = std::move(prompt);
    return placed;
  }
  const ModelConfig& config = engine.config();
  if (!config.vision) {
    fail(
        "{}: the model has no vision tower (its config has no vision_config), so it cannot take "
        "--image",
        engine.container().dir());
  }
  std::vector<PromptImage> images;
  for (const std::string& file : files)
    images.push_back(prepare_image(load_image_file(file), *config.vision));
  const auto pad = static_cast<int32_t>(config.vision->media_pad_id);
  const auto pads = static_cast<size_t>(std::count(prompt.begin(), prompt.end(), pad));
  if (pads == 0) {
    std::vector<int32_t> blocks;
    for (const PromptImage& image : images) {
      const auto begin = tok.encode_with_specials(fmt::format(
          "<|media_begin|>image {}x{}<|media_content|>", image.image.width, image.image.height));
      blocks.insert(blocks.end(), begin.begin(), begin.end());
      blocks.push_back(pad);
      const auto end = tok.encode_with_specials("<|media_end|>");
      blocks.insert(blocks.end(), end.begin(), end.end());
    }
    // After a BOS the tokenizer put first: the images open the text, not the sequence.
    const bool bos = !prompt.empty() && tok.bos_id() && prompt.front() == *tok.bos_id();
    prompt.insert(prompt.begin() + (bos ? 1 : 0), blocks.begin(), blocks.end());
  } else if (pads != images.size()) {
    fail("the prompt has {} media pad tokens (id {}) for {} --image files: one each", pads, pad,
         images.size());
  }
  ExpandedPrompt expanded = expand_media(prompt, pad, images);
  ImageEncoder encoder(engine.container(), config, engine.exec());
  std::vector<float> rows;
  placed.rows =
      media_rows_from(expanded, 0, config.hidden, [&](size_t i) -> const std::vector<float>& {
        rows = encoder.encode(images[i]);
        return rows;
      });
  for (const MediaRun& run : expanded.media) placed.positions += run.length;
  placed.tokens = std::move(expanded.tokens);
  placed.media = std::move(expanded.media);
  return placed;
}

}  // namespace sluice::cli
