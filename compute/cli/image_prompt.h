// compute/cli/image_prompt.h: --image for the commands that take a prompt
// as ids or text (run, eval): the vision tower loaded only then, each file
// encoded once, and the prompt's media pads expanded to the images'
// positions (k3.md §4.3). A prompt without a media pad gets each image's
// media block in front, tokenized as markup. (chat and serve render images
// through their chat format: compute/vision/prompt_images.h.)
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "compute/model/engine.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::cli {

void add_image_flag(CLI::App& cmd, std::vector<std::string>& files);

struct ImagePrompt {
  std::vector<int32_t> tokens;  // the prompt with every image's pad expanded
  std::vector<float> rows;      // the input embeddings of those pads, in order
  std::vector<MediaRun> media;  // where each image sits in `tokens`
  uint32_t positions = 0;       // image positions in all
};

// Encodes `files` with the engine's model and places them in `prompt`: one
// media pad per image in order, or, when the prompt has none, each image's
// media block before it. Throws Error naming the model when it has no vision
// tower, the file when an image cannot be read, and the prompt when its pads
// do not match the images.
ImagePrompt place_images(Engine& engine, const tokenizer::Tokenizer& tok,
                         std::vector<int32_t> prompt, const std::vector<std::string>& files);

}  // namespace sluice::cli
