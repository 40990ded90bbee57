// compute/convert/synth.h: `sluice synth`: a container with the exact
// dimensions of a real model (synth_shapes.h) and random contents, written
// through the converter's writers at disk speed (no k-means). Like a
// conversion it resumes, and manifest.json comes last, so an interrupted run
// never looks complete.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/convert/convert.h"
#include "compute/convert/routing_shape.h"

namespace sluice::convert {

struct SynthOptions {
  std::string shape;
  std::string output_dir;
  uint32_t layers = 0;  // keep the first N layers; 0: all
  // Cuts for tests and quick experiments (0: the shape's): fewer experts
  // per layer (top-k follows when above it), a smaller vocabulary (token
  // ids past it move to its last id). They change the config accordingly.
  uint32_t experts = 0;
  uint32_t vocab = 0;
  uint64_t seed = 1;
  int threads = 1;  // results never depend on it
  bool force = false;
  TrunkFormat lm_head_format = kDefaultLmHeadFormat;  // --head-quant
  // --routing realistic: the routing shape fitted for the config (called
  // only when trunk.bin is still to be written); empty: plain random weights.
  std::function<RoutingShape(const ModelConfig&)> fit_routing;
};

std::vector<std::string> synth_shape_names();

// The config.json a synth container of these options holds: the shape's,
// with the cuts applied and the layer lists (e.g. Kimi-Linear's KDA layers)
// cut consistently. Refuses an unknown shape, a cut above the shape, or a
// cut the family refuses, naming the flag.
nlohmann::ordered_json synth_config(const SynthOptions& options);

// Writes (or resumes) the container; returns the summary: shape, layers,
// seconds, container_bytes, bytes_per_second.
nlohmann::ordered_json synth_container(const SynthOptions& options, ConvertProgress& progress);

}  // namespace sluice::convert
