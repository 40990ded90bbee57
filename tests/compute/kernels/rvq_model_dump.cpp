// tests/compute/kernels/rvq_model_dump.cpp: runs the RVQ expert kernels on
// inputs that tests/scripts/test_rvq_model.py writes, so that the Python model
// of their arithmetic (scripts/sluicepy/rvq_tables.py), which the reference
// uses, is held to the engine bit for bit.
//
// Usage: rvq_model_dump DIR ISA. Reads DIR/shape ("rows cols tokens"),
// books.f32 (2 stages × 64 entries × 4), indices.u8 (the container's layout),
// scales.f16 (rows padded to 32) and x.f32 (tokens × cols); writes
// DIR/ISA-decoded-f32.f32 and ISA-decoded-int8.f32 (tokens × rows each), and
// for the tables of each activations mode A (int8: int8 codes, f32: int16
// codes) ISA-A-tables.f32 (tokens × rows), ISA-A-codes.i8 (each token's
// token_codes(), in their layout) and ISA-A-scales.f32 (each token's group
// scales). Exits 77 (skipped) when this CPU cannot run ISA.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/rvq.h"
#include "compute/kernels/rvq_decoded.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

template <typename T>
std::vector<T> read_exactly(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const auto bytes = static_cast<size_t>(in.tellg());
  if (bytes != count * sizeof(T))
    throw std::runtime_error(path + ": " + std::to_string(bytes) + " bytes, expected " +
                             std::to_string(count * sizeof(T)));
  std::vector<T> out(count);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
  return out;
}

template <typename T>
void write(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw std::runtime_error(path + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rvq_model_dump DIR ISA\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::string isa_text = argv[2];
  const Isa* named = nullptr;
  static constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  for (const Isa& isa : kIsas)
    if (isa_text == isa_name(isa)) named = &isa;
  if (named == nullptr)
    throw std::runtime_error("ISA " + isa_text + ": expected scalar, avx2 or avx512");
  if (!isa_supported(*named)) return 77;
  const Isa isa = *named;

  uint32_t rows = 0, cols = 0, tokens = 0;
  std::ifstream shape_file(dir + "/shape");
  if (!(shape_file >> rows >> cols >> tokens) || rows == 0 || tokens == 0 || cols == 0 ||
      cols % kRvqColsMultiple != 0 || cols > kRvqMaxCols)
    throw std::runtime_error(dir + "/shape: expected \"rows cols tokens\", cols a multiple of " +
                             std::to_string(kRvqColsMultiple));
  const RvqMatrixShape shape{rows, cols};
  constexpr size_t kStageFloats = size_t{kRvqEntries} * kRvqVecDim;
  const auto books = read_exactly<float>(dir + "/books.f32", size_t{kRvqStages} * kStageFloats);
  const auto indices = read_exactly<uint8_t>(dir + "/indices.u8", shape.index_bytes());
  const auto scales = read_exactly<uint16_t>(dir + "/scales.f16", shape.rows_padded());
  const auto x = read_exactly<float>(dir + "/x.f32", size_t{tokens} * cols);

  const RvqCodebooks codebooks(books.data(), books.data() + kStageFloats);
  const RvqMatrixView matrix{shape, indices.data(), scales.data()};
  std::vector<float> y(size_t{tokens} * rows);
  const std::string prefix = dir + "/" + isa_name(isa);

  std::vector<uint32_t> all(tokens);
  std::iota(all.begin(), all.end(), 0u);
  for (const auto activations : {TrunkActivations::kInt8, TrunkActivations::kF32}) {
    const Exec exec{isa, nullptr, activations};
    const std::string tables = prefix + "-" + trunk_activations_name(activations);
    RvqTable table;
    table.build(codebooks, x.data(), cols, tokens, exec);
    std::vector<int8_t> codes;
    std::vector<float> table_scales;
    for (uint32_t t = 0; t < tokens; ++t) {
      codes.insert(codes.end(), table.token_codes(t),
                   table.token_codes(t) + table.codes_per_token());
      table_scales.insert(table_scales.end(), table.token_scales(t),
                          table.token_scales(t) + table.groups());
    }
    write(tables + "-codes.i8", codes);
    write(tables + "-scales.f32", table_scales);
    rvq_matmul(table, all, matrix, y.data(), exec);
    write(tables + "-tables.f32", y);
  }

  rvq_matmul_decoded(codebooks, matrix, x.data(), tokens, y.data(),
                     Exec{isa, nullptr, TrunkActivations::kF32});
  write(prefix + "-decoded-f32.f32", y);
  rvq_matmul_decoded(codebooks, matrix, x.data(), tokens, y.data(),
                     Exec{isa, nullptr, TrunkActivations::kInt8});
  write(prefix + "-decoded-int8.f32", y);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "rvq_model_dump: %s\n", e.what());
  return 1;
}
