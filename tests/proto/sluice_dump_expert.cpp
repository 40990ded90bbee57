// tests/proto/sluice_dump_expert.cpp: test tool that decodes one expert
// matrix with the scalar RVQ decoder and writes it as raw little-endian f32,
// rows × cols unpadded, for the Python/C++ round-trip test. Never installed.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "proto/aligned_buffer.h"
#include "proto/container.h"
#include "proto/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Decode one expert matrix of a sluice container to raw little-endian f32"};
  std::string model, matrix, out;
  uint32_t layer = 0, expert = 0;
  app.add_option("MODEL", model, "container directory")->required();
  app.add_option("--layer", layer, "model layer index (a MoE layer)")->required();
  app.add_option("--expert", expert, "expert id")->required();
  app.add_option("--matrix", matrix, "gate, up or down")
      ->required()
      ->check(CLI::IsMember({"gate", "up", "down"}));
  app.add_option("--out", out, "output file (rows x cols f32)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const sluice::Container c = sluice::Container::open(model);
    const sluice::MoeLayerInfo& info = c.moe_layer(layer);
    sluice::AlignedBuffer record(info.record_stride, sluice::kRecordAlign);
    c.read_record(layer, expert, record.data(), true);
    const auto kind = matrix == "gate" ? sluice::MatrixKind::kGate
                      : matrix == "up" ? sluice::MatrixKind::kUp
                                       : sluice::MatrixKind::kDown;
    const std::vector<float> w = sluice::decode_rvq_matrix(record.data(), info.layout, kind,
                                                           c.load_codebooks(), info.codebook_base);
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(w.data()),
               static_cast<std::streamsize>(w.size() * sizeof(float)));
    if (!file) sluice::fail("{}: cannot write", out);
    const auto& shape = info.layout.matrices[static_cast<int>(kind)];
    fmt::print("{} {}\n", shape.rows, shape.cols);
  } catch (const sluice::Error& e) {
    fmt::print(stderr, "sluice_dump_expert: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
