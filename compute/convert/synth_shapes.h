// compute/convert/synth_shapes.h: the shape table of `sluice synth`, one
// JSON text per real model (compute/convert/shapes/*.json, compiled in by
// embed_shapes.py). Adding a shape is adding a file there and its name to
// compute/convert/meson.build; no code.
#pragma once

#include <span>

namespace sluice::convert {

struct ShapeText {
  const char* name;  // the file name without .json: what `sluice synth` takes
  const char* json;  // {"description", "experts_key", "top_k_key", "layer_lists", "config"}
};

std::span<const ShapeText> shape_texts();

}  // namespace sluice::convert
