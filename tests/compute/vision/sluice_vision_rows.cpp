// tests/compute/vision/sluice_vision_rows.cpp: test tool that runs a
// container's vision tower on raw normalised pixels (f32 [3][14·H][14·W],
// little-endian) and writes the projector rows as raw f32, for the agreement
// test against scripts/sluicepy/vision.py. Never installed.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "compute/kernels/dispatch.h"
#include "compute/vision/vision_tower.h"
#include "proto/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Run a container's vision tower on raw pixels and write its rows as raw little-endian f32"};
  std::string model, pixels_path, out;
  uint32_t grid_width = 0, grid_height = 0;
  app.add_option("MODEL", model, "container directory")->required();
  app.add_option("--pixels", pixels_path, "f32 [3][14*H][14*W], normalised")->required();
  app.add_option("--grid-width", grid_width, "patches per row (W)")->required();
  app.add_option("--grid-height", grid_height, "patch rows (H)")->required();
  app.add_option("--out", out, "output file: (H/2)(W/2) rows of the text hidden size, f32")
      ->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const sluice::Container container = sluice::Container::open(model);
    const sluice::ModelConfig config =
        sluice::ModelConfig::from_json(container.arch(), container.config());
    const sluice::VisionWeights weights = sluice::VisionWeights::load(container, config);
    std::ifstream in(pixels_path, std::ios::binary);
    if (!in) sluice::fail("{}: cannot open", pixels_path);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() % sizeof(float) != 0)
      sluice::fail("{}: not a whole number of f32 values", pixels_path);
    std::vector<float> pixels(bytes.size() / sizeof(float));
    std::memcpy(pixels.data(), bytes.data(), bytes.size());
    const sluice::VisionTower tower(*config.vision, weights,
                                    {sluice::kernels::isa_from_environment(), nullptr});
    const std::vector<float> rows = tower.encode(pixels, {grid_height, grid_width});
    std::FILE* f = std::fopen(out.c_str(), "wb");
    if (f == nullptr || std::fwrite(rows.data(), sizeof(float), rows.size(), f) != rows.size() ||
        std::fclose(f) != 0) {
      sluice::fail("{}: cannot write", out);
    }
  } catch (const sluice::Error& e) {
    fmt::print(stderr, "sluice_vision_rows: {}\n", e.what());
    return 1;
  }
  return 0;
}
