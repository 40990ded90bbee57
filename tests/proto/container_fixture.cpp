// tests/proto/container_fixture.cpp: the hand-written container. Layout,
// header bytes and the packing of the 6-bit codes are computed here from
// FORMAT.md's formulas, deliberately not through proto/, so tests check one
// against the other.
#include "tests/proto/container_fixture.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

namespace sluice::testing {
namespace {

uint32_t crc_of(const std::string& bytes, uint32_t running = 0) {
  return static_cast<uint32_t>(
      ::crc32(running, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

using nlohmann::json;

uint64_t align(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

void put_le(std::string& out, uint64_t offset, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// f16 bit patterns with at most 3 significant bits, so products stay exact:
// 0.5, 0.75, 1.5, 2, 3, 0.375, 0, and the subnormal 2^-20.
constexpr uint16_t kScaleBits[] = {0x3800, 0x3A00, 0x3E00, 0x4000, 0x4200, 0x3600, 0x0000, 0x0010};

struct Geometry {
  uint32_t rows_padded[3];
  uint32_t offsets[3];
  uint32_t scales_off;
  uint32_t payload_end;
  uint32_t stride;
};

Geometry geometry(uint32_t hidden, uint32_t width) {
  const uint32_t rows[3] = {width, width, hidden};
  const uint32_t cols[3] = {hidden, hidden, width};
  Geometry g{};
  uint64_t cursor = 64;
  for (int k = 0; k < 3; ++k) {
    g.rows_padded[k] = static_cast<uint32_t>(align(rows[k], 32));
    g.offsets[k] = static_cast<uint32_t>(cursor);
    // 48 bytes per (row block of 32, vector of 4).
    cursor = align(cursor + uint64_t{g.rows_padded[k] / 32} * (cols[k] / 4) * 48, 64);
  }
  g.scales_off = static_cast<uint32_t>(cursor);
  g.payload_end = g.scales_off + 2 * (g.rows_padded[0] + g.rows_padded[1] + g.rows_padded[2]);
  g.stride = static_cast<uint32_t>(align(g.payload_end, 4096));
  return g;
}

std::string build_record(const Geometry& g, uint32_t layer, uint32_t expert, uint32_t codebook_base,
                         const std::array<FixtureMatrix, 3>& matrices) {
  std::string record(g.stride, '\0');
  const auto set_bits = [&](uint64_t offset, uint32_t bits) {
    record[offset] = static_cast<char>(static_cast<uint8_t>(record[offset]) | bits);
  };
  uint32_t scale_cursor = g.scales_off;
  for (int k = 0; k < 3; ++k) {
    const FixtureMatrix& m = matrices[k];
    const uint32_t nv = m.cols / 4;
    for (uint32_t r = 0; r < m.rows; ++r) {
      const uint32_t i = r % 16, h = r % 32 / 16;
      for (uint32_t v = 0; v < nv; ++v) {
        const uint64_t unit = g.offsets[k] + (uint64_t{r / 32} * nv + v) * 48;
        for (int s = 0; s < 2; ++s) {
          const uint32_t code = m.index(r, v, s), lo = code % 16, hi = code / 16;
          set_bits(unit + 16 * s + i, lo << 4 * h);
          set_bits(unit + 32 + i, hi << (4 * s + 2 * h));
        }
      }
      put_le(record, scale_cursor + 2 * r, m.scales[r], 2);
    }
    scale_cursor += 2 * g.rows_padded[k];
  }
  const uint32_t crc = static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(record.data()) + 64, g.payload_end - 64));
  put_le(record, 0, 0x52584C53, 4);
  put_le(record, 4, 2, 2);
  put_le(record, 6, layer, 2);
  put_le(record, 8, expert, 4);
  put_le(record, 12, codebook_base, 4);
  put_le(record, 16, g.stride, 4);
  for (int k = 0; k < 3; ++k) put_le(record, 20 + 4 * k, g.offsets[k], 4);
  put_le(record, 32, g.scales_off, 4);
  put_le(record, 36, g.payload_end, 4);
  put_le(record, 40, crc, 4);
  return record;
}

FixtureTrunkTensor make_trunk_tensor(std::mt19937_64& rng, std::string name, std::string format,
                                     uint64_t rows, uint64_t cols, bool one_d) {
  FixtureTrunkTensor t{std::move(name), std::move(format), rows, cols, one_d, {}, {}, {}, 0};
  if (t.format == "f32") {
    std::uniform_int_distribution<int> value(-1000, 1000);
    for (uint64_t i = 0; i < rows * cols; ++i)
      t.values.push_back(static_cast<float>(value(rng)) / 256.0f);
    return t;
  }
  const int lo = t.format == "q8g128" ? -127 : -8;
  const int hi = t.format == "q8g128" ? 127 : 7;
  std::uniform_int_distribution<int> q(lo, hi);
  for (uint64_t i = 0; i < rows * cols; ++i) t.q.push_back(q(rng));
  const uint64_t groups = align(cols, 128) / 128;
  for (uint64_t i = 0; i < rows * groups; ++i) t.scales.push_back(kScaleBits[i % 6]);
  return t;
}

// Appends `t` to trunk.bin's bytes; returns its manifest entry.
json append_trunk_tensor(std::string& trunk, FixtureTrunkTensor& t) {
  const uint64_t padded = t.format == "f32" ? t.cols : align(t.cols, 128);
  t.offset = align(trunk.size(), 64);
  trunk.resize(t.offset);
  std::string data;
  if (t.format == "f32") {
    data.resize(t.values.size() * 4);
    for (size_t i = 0; i < t.values.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &t.values[i], 4);
      put_le(data, 4 * i, bits, 4);
    }
  } else if (t.format == "q8g128") {
    data.assign(t.rows * padded, '\0');
    for (uint64_t r = 0; r < t.rows; ++r) {
      for (uint64_t c = 0; c < t.cols; ++c)
        data[r * padded + c] = static_cast<char>(t.q[r * t.cols + c]);
    }
  } else {
    data.assign(t.rows * padded / 2, static_cast<char>(0x88));  // padding nibbles are 8
    for (uint64_t r = 0; r < t.rows; ++r) {
      for (uint64_t c = 0; c < t.cols; ++c) {
        const uint64_t i = r * padded + c;
        const auto nibble = static_cast<uint8_t>(t.q[r * t.cols + c] + 8);
        auto byte = static_cast<uint8_t>(data[i / 2]);
        byte = i % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | nibble)
                          : static_cast<uint8_t>((byte & 0x0f) | nibble << 4);
        data[i / 2] = static_cast<char>(byte);
      }
    }
  }
  trunk += data;
  json entry = {{"name", t.name},       {"format", t.format}, {"offset", t.offset},
                {"bytes", data.size()}, {"scale_offset", 0},  {"scale_bytes", 0},
                {"crc32", crc_of(data)}};
  entry["shape"] = t.one_d ? json::array({t.cols}) : json::array({t.rows, t.cols});
  if (t.format != "f32") {
    const uint64_t scale_offset = align(trunk.size(), 64);
    trunk.resize(scale_offset);
    std::string scales(t.scales.size() * 2, '\0');
    for (size_t i = 0; i < t.scales.size(); ++i) put_le(scales, 2 * i, t.scales[i], 2);
    trunk += scales;
    entry["crc32"] = crc_of(scales, crc_of(data));
    entry["scale_offset"] = scale_offset;
    entry["scale_bytes"] = scales.size();
  }
  return entry;
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/sluice-test-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string Fixture::bank_path(uint32_t layer) const {
  return fmt::format("{}/experts-L{:03}.bin", dir, layer);
}

float fixture_codebook_value(uint32_t id, uint32_t code, uint32_t j) {
  const int stage = static_cast<int>(id % 2);  // bases are multiples of 6
  const int numerator = static_cast<int>((code * 3 + j * 5 + id * 17) % 256) - 128;
  return static_cast<float>(std::ldexp(numerator, -(7 + 5 * stage)));
}

Fixture write_fixture(const std::string& dir, const FixtureSpec& spec) {
  Fixture fx;
  fx.dir = dir;
  fx.spec = spec;
  fx.codebook_count = 6 * spec.layers;
  std::mt19937_64 rng(spec.seed);

  std::string codebooks(size_t{fx.codebook_count} * 64 * 4 * 4, '\0');
  for (uint32_t id = 0; id < fx.codebook_count; ++id) {
    for (uint32_t c = 0; c < 64; ++c) {
      for (uint32_t j = 0; j < 4; ++j) {
        const float value = fixture_codebook_value(id, c, j);
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        put_le(codebooks, ((size_t{id} * 64 + c) * 4 + j) * 4, bits, 4);
      }
    }
  }
  write_bytes(dir + "/codebooks.bin", codebooks);

  const Geometry g = geometry(spec.hidden, spec.expert_width);
  fx.record_stride = g.stride;
  fx.payload_end = g.payload_end;
  json moe_layers = json::array();
  std::uniform_int_distribution<int> code(0, 63);
  for (uint32_t layer = 0; layer < spec.layers; ++layer) {
    std::string bank;
    auto& experts = fx.experts.emplace_back();
    for (uint32_t e = 0; e < spec.experts; ++e) {
      std::array<FixtureMatrix, 3> matrices;
      const uint32_t rows[3] = {spec.expert_width, spec.expert_width, spec.hidden};
      const uint32_t cols[3] = {spec.hidden, spec.hidden, spec.expert_width};
      for (int k = 0; k < 3; ++k) {
        FixtureMatrix& m = matrices[k];
        m.rows = rows[k];
        m.cols = cols[k];
        for (size_t i = 0; i < size_t{m.rows} * (m.cols / 4) * 2; ++i)
          m.indices.push_back(static_cast<uint8_t>(code(rng)));
        for (uint32_t r = 0; r < m.rows; ++r)
          m.scales.push_back(kScaleBits[(r + e + layer * 3 + k) % 8]);
      }
      bank += build_record(g, layer, e, 6 * layer, matrices);
      experts.push_back(std::move(matrices));
    }
    write_bytes(fx.bank_path(layer), bank);
    uint32_t records_crc = 0;
    for (uint32_t e = 0; e < spec.experts; ++e) {
      records_crc = crc_of(bank.substr(size_t{e} * g.stride + 40, 4), records_crc);
    }
    moe_layers.push_back({{"layer", layer},
                          {"file", fmt::format("experts-L{:03}.bin", layer)},
                          {"experts", spec.experts},
                          {"record_stride", g.stride},
                          {"bytes", bank.size()},
                          {"codebook_base", 6 * layer},
                          {"hidden", spec.hidden},
                          {"expert_width", spec.expert_width},
                          {"records_crc32", records_crc}});
  }

  std::string trunk;
  json tensors = json::array();
  fx.trunk.push_back(make_trunk_tensor(rng, "model.embed_tokens.weight", "q8g128", spec.vocab,
                                       spec.hidden, false));
  fx.trunk.push_back(
      make_trunk_tensor(rng, "model.layers.0.self_attn.q_proj.weight", "q4g128", 16, 136, false));
  fx.trunk.push_back(make_trunk_tensor(rng, "model.norm.weight", "f32", 1, spec.hidden, true));
  fx.trunk.push_back(make_trunk_tensor(rng, "model.layers.0.mlp.gate.weight", "f32", spec.experts,
                                       spec.hidden, false));
  for (FixtureTrunkTensor& t : fx.trunk) tensors.push_back(append_trunk_tensor(trunk, t));
  trunk.resize(align(trunk.size(), 64));
  fx.trunk_bytes = trunk.size();
  write_bytes(dir + "/trunk.bin", trunk);

  const std::string tokenizer = spec.tokenizer_json.value_or("{\"model\": {\"type\": \"BPE\"}}\n");
  const std::string tokenizer_config = spec.tokenizer_config.value_or("{}\n");
  write_bytes(dir + "/tokenizer.json", tokenizer);
  write_bytes(dir + "/tokenizer_config.json", tokenizer_config);

  const json config = {{"architectures", {"OlmoeForCausalLM"}},
                       {"model_type", "olmoe"},
                       {"vocab_size", spec.vocab},
                       {"hidden_size", spec.hidden},
                       {"intermediate_size", spec.expert_width},
                       {"num_hidden_layers", spec.layers},
                       {"num_attention_heads", 4},
                       {"num_key_value_heads", 4},
                       {"num_experts", spec.experts},
                       {"num_experts_per_tok", spec.top_k}};
  json manifest = {
      {"format", "sluice"},
      {"format_version", 3},
      {"arch", "olmoe"},
      {"config", config},
      {"source", {{"files", json::array()}, {"config_crc32", 0}}},
      {"expert_quant",
       {{"method", "rvq"},
        {"stages", 2},
        {"entries", 64},
        {"vec_dim", 4},
        {"index_bits", 6},
        {"bits_per_weight", 3.0},
        {"row_block", 32},
        {"index_layout", "rowblock32.vector.split6"},
        {"scale", "f16_row_absmax"},
        {"codebook_sharing", "layer.matrix.stage"},
        {"kmeans",
         {{"seed", 1234}, {"sample_vectors", 65536}, {"iterations", 12}, {"init", "kmeans++"}}}}},
      {"trunk", {{"file", "trunk.bin"}, {"bytes", trunk.size()}, {"tensors", tensors}}},
      {"codebooks",
       {{"file", "codebooks.bin"},
        {"bytes", codebooks.size()},
        {"count", fx.codebook_count},
        {"crc32", crc_of(codebooks)}}},
      {"moe_layers", moe_layers},
      {"tokenizer",
       {{"files", {"tokenizer.json", "tokenizer_config.json"}},
        {"crc32", {crc_of(tokenizer), crc_of(tokenizer_config)}},
        {"chat_template", nullptr}}}};
  if (spec.chat_template) manifest["tokenizer"]["chat_template"] = *spec.chat_template;
  write_manifest(fx.manifest_path(), manifest);
  return fx;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

json sealed(json manifest) {
  manifest.erase("manifest_crc32");
  manifest["manifest_crc32"] = crc_of(manifest.dump());
  return manifest;
}

void write_manifest(const std::string& path, const json& manifest) {
  write_json(path, sealed(manifest));
}

void write_json(const std::string& path, const json& value) {
  write_bytes(path, value.dump(2) + "\n");
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(&c, 1);
  if (!file) throw std::runtime_error(fmt::format("cannot flip byte {} of {}", offset, path));
}

void truncate_file(const std::string& path, uint64_t size) {
  std::filesystem::resize_file(path, size);
}

}  // namespace sluice::testing
