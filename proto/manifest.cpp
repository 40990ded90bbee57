// proto/manifest.cpp: manifest.json parsing. Every number is range-checked
// before it is used in arithmetic, so a hostile manifest yields an Error that
// names the field, never an overflow, a huge allocation or a crash.
#include "proto/manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>

#include "proto/checksum.h"
#include "proto/error.h"
#include "proto/family_spec.h"
#include "proto/model_config.h"

namespace sluice {
namespace {

using nlohmann::json;


// Wraps one manifest so each check can name the file and the field.
class Fields {
 public:
  explicit Fields(const std::string& path) : path_(path) {}

  [[noreturn]] void bad(std::string_view field, std::string_view what) const {
    fail("{}: {} {}", path_, field, what);
  }

  const json& member(const json& object, std::string_view field, const char* key) const {
    if (!object.is_object())
      bad(field, fmt::format("must be an object, found {}", object.type_name()));
    const auto it = object.find(key);
    if (it == object.end()) bad(join(field, key), "is missing");
    return *it;
  }

  const json& object(const json& parent, std::string_view field, const char* key) const {
    const json& value = member(parent, field, key);
    if (!value.is_object())
      bad(join(field, key), fmt::format("must be an object, found {}", value.type_name()));
    return value;
  }

  const json& array(const json& parent, std::string_view field, const char* key) const {
    const json& value = member(parent, field, key);
    if (!value.is_array())
      bad(join(field, key), fmt::format("must be an array, found {}", value.type_name()));
    return value;
  }

  std::string string(const json& parent, std::string_view field, const char* key) const {
    return as_string(member(parent, field, key), join(field, key));
  }

  std::string as_string(const json& value, std::string_view field) const {
    if (!value.is_string())
      bad(field, fmt::format("must be a string, found {}", value.type_name()));
    return value.get<std::string>();
  }

  uint64_t integer(const json& parent, std::string_view field, const char* key, uint64_t lo,
                   uint64_t hi) const {
    return as_integer(member(parent, field, key), join(field, key), lo, hi);
  }

  uint64_t as_integer(const json& value, std::string_view field, uint64_t lo, uint64_t hi) const {
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      bad(field, fmt::format("is {}, a negative number", value.get<int64_t>()));
    }
    if (!value.is_number_unsigned()) {
      bad(field, fmt::format("must be a non-negative integer, found {} {}", value.type_name(),
                             brief(value)));
    }
    const uint64_t number = value.get<uint64_t>();
    if (number > hi) bad(field, fmt::format("is {}, above the limit of {}", number, hi));
    if (number < lo) bad(field, fmt::format("is {}, below the minimum of {}", number, lo));
    return number;
  }

  uint32_t crc(const json& parent, std::string_view field, const char* key) const {
    return static_cast<uint32_t>(integer(parent, field, key, 0, UINT32_MAX));
  }

  void expect_string(const json& parent, std::string_view field, const char* key,
                     std::string_view wanted) const {
    const std::string found = string(parent, field, key);
    if (found != wanted) {
      bad(join(field, key), fmt::format("is \"{}\"; this build reads only \"{}\"", found, wanted));
    }
  }

  void expect_integer(const json& parent, std::string_view field, const char* key,
                      uint64_t wanted) const {
    const uint64_t found = integer(parent, field, key, 0, UINT64_MAX);
    if (found != wanted)
      bad(join(field, key), fmt::format("is {}; this build reads only {}", found, wanted));
  }

  // A bare file name inside the container directory, never a path out of it.
  std::string file_name(const json& value, std::string_view field) const {
    const std::string name = as_string(value, field);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      bad(field, fmt::format("\"{}\" is not a plain file name inside the container", name));
    }
    return name;
  }

  static std::string join(std::string_view field, const char* key) {
    return field.empty() ? std::string(key) : fmt::format("{}.{}", field, key);
  }

 private:
  static std::string brief(const json& value) {
    std::string text = value.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  }

  const std::string& path_;
};

// The config is validated by its family spec, the same reading every room
// uses, so the manifest cannot accept what the model refuses.
void parse_config(const Fields& f, const json& root, Manifest& m, const std::string& path) {
  m.config = f.object(root, "", "config");
  const ModelConfig config = ModelConfig::from_json(m.arch, m.config, path + ": config");
  m.layer_count = config.layers;
  m.vocab_size = config.vocab;
  m.hidden_size = config.hidden;
  m.top_k = config.top_k;
}

void parse_expert_quant(const Fields& f, const json& root, Manifest& m) {
  const json& q = f.object(root, "", "expert_quant");
  const std::string where = "expert_quant";
  f.expect_string(q, where, "method", "rvq");
  f.expect_integer(q, where, "stages", kRvqStages);
  f.expect_integer(q, where, "entries", kRvqEntries);
  f.expect_integer(q, where, "vec_dim", kRvqVecDim);
  f.expect_integer(q, where, "index_bits", kRvqCodeBits);
  f.expect_integer(q, where, "row_block", kRowBlock);
  f.expect_string(q, where, "index_layout", kRvqIndexLayout);
  f.expect_string(q, where, "scale", "f16_row_absmax");
  f.expect_string(q, where, "codebook_sharing", "layer.matrix.stage");
  m.codebook_sharing = "layer.matrix.stage";
  const json& bpw = f.member(q, where, "bits_per_weight");
  if (!bpw.is_number())
    f.bad("expert_quant.bits_per_weight",
          fmt::format("must be a number, found {}", bpw.type_name()));
  m.bits_per_weight = bpw.get<double>();
}

TrunkTensorInfo parse_trunk_tensor(const Fields& f, const json& t, const std::string& where,
                                   uint64_t trunk_bytes) {
  TrunkTensorInfo info;
  info.name = f.string(t, where, "name");
  const std::string named = fmt::format("{} ({})", where, info.name);
  const std::string format_name = f.string(t, named, "format");
  const auto format = parse_trunk_format(format_name);
  if (!format)
    f.bad(named + ".format", fmt::format("\"{}\" is not one of f32, q8g128, q6g128, q4g128", format_name));
  info.format = *format;
  const json& shape = f.array(t, named, "shape");
  if (shape.size() < 1 || shape.size() > 4) {
    f.bad(named + ".shape", fmt::format("has {} dimensions; tensors have 1 to 4", shape.size()));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    info.shape.push_back(
        f.as_integer(shape[i], fmt::format("{}.shape[{}]", named, i), 1, kMaxTrunkDim));
  }
  if (shape.size() != 2 && info.format != TrunkFormat::kF32) {
    f.bad(named, fmt::format("is {}-D but stored as {}; only matrices are quantized", shape.size(), format_name));
  }
  // A tensor of more than one dimension is rows of its last one (Kimi's
  // [P, 1, 4] convolutions, [1, 1, H, 1] decay rates).
  info.rows = 1;
  for (size_t i = 0; i + 1 < info.shape.size(); ++i) info.rows *= info.shape[i];
  if (info.rows > kMaxTrunkDim) f.bad(named + ".shape", fmt::format("holds {} rows, over {}", info.rows, kMaxTrunkDim));
  info.cols = info.shape.back();
  info.offset = f.integer(t, named, "offset", 0, trunk_bytes);
  info.bytes = f.integer(t, named, "bytes", 0, trunk_bytes);
  info.scale_offset = f.integer(t, named, "scale_offset", 0, trunk_bytes);
  info.scale_bytes = f.integer(t, named, "scale_bytes", 0, trunk_bytes);
  info.crc32 = f.crc(t, named, "crc32");
  if (info.offset % kTrunkAlign != 0) {
    f.bad(named + ".offset", fmt::format("{} is not a multiple of {}", info.offset, kTrunkAlign));
  }
  if (info.bytes != info.expected_bytes()) {
    f.bad(named + ".bytes",
          fmt::format("is {}, but a {} tensor of shape {} takes {}", info.bytes, format_name,
                      fmt::join(info.shape, "x"), info.expected_bytes()));
  }
  if (info.bytes > trunk_bytes - info.offset) {
    f.bad(named, fmt::format("bytes [{}, {}) run past the end of trunk.bin ({} bytes)", info.offset,
                             info.offset + info.bytes, trunk_bytes));
  }
  if (info.format == TrunkFormat::kF32) {
    if (info.scale_offset != 0 || info.scale_bytes != 0) {
      f.bad(named, "is f32 but has scales (scale_offset and scale_bytes must be 0)");
    }
    return info;
  }
  if (info.scale_bytes != info.expected_scale_bytes()) {
    f.bad(named + ".scale_bytes",
          fmt::format("is {}, but {} rows of {} groups take {}", info.scale_bytes, info.rows,
                      info.groups_per_row(), info.expected_scale_bytes()));
  }
  if (info.scale_offset % kTrunkAlign != 0) {
    f.bad(named + ".scale_offset",
          fmt::format("{} is not a multiple of {}", info.scale_offset, kTrunkAlign));
  }
  if (info.scale_bytes > trunk_bytes - info.scale_offset) {
    f.bad(named, fmt::format("scales [{}, {}) run past the end of trunk.bin ({} bytes)",
                             info.scale_offset, info.scale_offset + info.scale_bytes, trunk_bytes));
  }
  return info;
}

// Two tensors sharing bytes would let one tensor's damage pass as another's
// data; every data and scale range must stand alone.
void check_trunk_overlap(const Fields& f, const std::vector<TrunkTensorInfo>& tensors) {
  struct Range {
    uint64_t begin, end;
    std::string what;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TrunkTensorInfo& t = tensors[i];
    const std::string named = fmt::format("trunk.tensors[{}] ({})", i, t.name);
    if (t.bytes != 0) ranges.push_back({t.offset, t.offset + t.bytes, named + " data"});
    if (t.scale_bytes != 0)
      ranges.push_back({t.scale_offset, t.scale_offset + t.scale_bytes, named + " scales"});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      f.bad(ranges[i].what, fmt::format("[{}, {}) overlaps {} [{}, {})", ranges[i].begin,
                                        ranges[i].end, ranges[i - 1].what, ranges[i - 1].begin,
                                        ranges[i - 1].end));
    }
  }
}

void parse_trunk(const Fields& f, const json& root, Manifest& m) {
  const json& trunk = f.object(root, "", "trunk");
  if (f.file_name(f.member(trunk, "trunk", "file"), "trunk.file") != kTrunkFile) {
    f.bad("trunk.file", fmt::format("must be \"{}\"", kTrunkFile));
  }
  m.trunk_bytes = f.integer(trunk, "trunk", "bytes", 0, UINT64_MAX);
  const json& tensors = f.array(trunk, "trunk", "tensors");
  std::set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TrunkTensorInfo info =
        parse_trunk_tensor(f, tensors[i], fmt::format("trunk.tensors[{}]", i), m.trunk_bytes);
    if (!names.insert(info.name).second) {
      f.bad(fmt::format("trunk.tensors[{}]", i),
            fmt::format("repeats the tensor name \"{}\"", info.name));
    }
    m.trunk_tensors.push_back(std::move(info));
  }
  check_trunk_overlap(f, m.trunk_tensors);
}

void parse_codebooks(const Fields& f, const json& root, Manifest& m) {
  const json& books = f.object(root, "", "codebooks");
  if (f.file_name(f.member(books, "codebooks", "file"), "codebooks.file") != kCodebooksFile) {
    f.bad("codebooks.file", fmt::format("must be \"{}\"", kCodebooksFile));
  }
  m.codebook_count =
      static_cast<uint32_t>(f.integer(books, "codebooks", "count", 1, kMaxCodebookCount));
  m.codebooks_bytes = f.integer(books, "codebooks", "bytes", 0, UINT64_MAX);
  m.codebooks_crc32 = f.crc(books, "codebooks", "crc32");
  if (m.codebooks_bytes != uint64_t{m.codebook_count} * kCodebookBytes) {
    f.bad("codebooks.bytes",
          fmt::format("is {}, but {} codebooks of {} bytes take {}", m.codebooks_bytes,
                      m.codebook_count, kCodebookBytes, m.codebook_count * kCodebookBytes));
  }
}

MoeLayerInfo parse_moe_layer(const Fields& f, const json& entry, const std::string& where,
                             const Manifest& m) {
  MoeLayerInfo layer;
  layer.layer = static_cast<uint32_t>(f.integer(entry, where, "layer", 0, m.layer_count - 1));
  layer.file = f.file_name(f.member(entry, where, "file"), where + ".file");
  if (layer.file != bank_file_name(layer.layer)) {
    f.bad(where + ".file", fmt::format("is \"{}\"; layer {} is stored in \"{}\"", layer.file,
                                       layer.layer, bank_file_name(layer.layer)));
  }
  layer.experts = static_cast<uint32_t>(f.integer(entry, where, "experts", 1, kMaxExpertsPerLayer));
  if (m.top_k > layer.experts) {
    f.bad(where + ".experts", fmt::format("is {}, fewer than top-k {}", layer.experts, m.top_k));
  }
  layer.hidden = static_cast<uint32_t>(f.integer(entry, where, "hidden", 1, kMaxHidden));
  layer.expert_width =
      static_cast<uint32_t>(f.integer(entry, where, "expert_width", 1, kMaxExpertWidth));
  if (layer.hidden % kRvqColsMultiple != 0 || layer.expert_width % kRvqColsMultiple != 0) {
    f.bad(where, fmt::format("hidden {} and expert_width {} must both be multiples of {}",
                             layer.hidden, layer.expert_width, kRvqColsMultiple));
  }
  // RecordLayout works in u32 offsets; refuse shapes whose record would not
  // fit the stride bound before it is computed, so nothing can wrap.
  const RvqMatrixShape gate{layer.expert_width, layer.hidden};
  const RvqMatrixShape down{layer.hidden, layer.expert_width};
  const uint64_t record_bound = kRecordHeaderBytes + 2 * gate.index_bytes() + down.index_bytes() +
                                3 * kSectionAlign +
                                (2 * gate.rows_padded() + down.rows_padded()) * 2;
  if (record_bound > kMaxRecordStride) {
    f.bad(where, fmt::format("hidden {} and expert_width {} need records above the {}-byte limit",
                             layer.hidden, layer.expert_width, kMaxRecordStride));
  }
  layer.layout = RecordLayout::compute(layer.hidden, layer.expert_width);
  layer.record_stride =
      static_cast<uint32_t>(f.integer(entry, where, "record_stride", 1, kMaxRecordStride));
  if (layer.record_stride % kRecordAlign != 0) {
    f.bad(where + ".record_stride",
          fmt::format("{} is not a multiple of {}", layer.record_stride, kRecordAlign));
  }
  if (layer.record_stride != layer.layout.stride) {
    f.bad(where + ".record_stride",
          fmt::format("is {}, but a record of hidden {} and expert width {} takes {}",
                      layer.record_stride, layer.hidden, layer.expert_width, layer.layout.stride));
  }
  layer.bytes = f.integer(entry, where, "bytes", 0, UINT64_MAX);
  layer.records_crc32 = f.crc(entry, where, "records_crc32");
  if (layer.bytes != uint64_t{layer.experts} * layer.record_stride) {
    f.bad(where + ".bytes",
          fmt::format("is {}, but {} experts × stride {} = {}", layer.bytes, layer.experts,
                      layer.record_stride, uint64_t{layer.experts} * layer.record_stride));
  }
  layer.codebook_base =
      static_cast<uint32_t>(f.integer(entry, where, "codebook_base", 0, kMaxCodebookCount));
  if (uint64_t{layer.codebook_base} + kCodebooksPerLayer > m.codebook_count) {
    f.bad(where + ".codebook_base",
          fmt::format("is {}; it needs codebooks up to {} but the container has {}",
                      layer.codebook_base, layer.codebook_base + kCodebooksPerLayer - 1,
                      m.codebook_count));
  }
  return layer;
}

void parse_moe_layers(const Fields& f, const json& root, Manifest& m) {
  const json& layers = f.array(root, "", "moe_layers");
  if (layers.empty()) f.bad("moe_layers", "is empty; a container holds at least one MoE layer");
  if (layers.size() > m.layer_count) {
    f.bad("moe_layers",
          fmt::format("has {} entries but the model has {} layers", layers.size(), m.layer_count));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    MoeLayerInfo layer = parse_moe_layer(f, layers[i], fmt::format("moe_layers[{}]", i), m);
    if (!m.moe_layers.empty() && layer.layer <= m.moe_layers.back().layer) {
      f.bad(fmt::format("moe_layers[{}].layer", i),
            fmt::format("is {}, not after the previous entry's {}", layer.layer,
                        m.moe_layers.back().layer));
    }
    m.moe_layers.push_back(std::move(layer));
  }
}

void parse_tokenizer(const Fields& f, const json& root, Manifest& m) {
  const json& tok = f.object(root, "", "tokenizer");
  const json& files = f.array(tok, "tokenizer", "files");
  for (size_t i = 0; i < files.size(); ++i) {
    m.tokenizer_files.push_back(f.file_name(files[i], fmt::format("tokenizer.files[{}]", i)));
  }
  const json& sums = f.array(tok, "tokenizer", "crc32");
  if (sums.size() != files.size()) {
    f.bad("tokenizer.crc32", fmt::format("has {} entries for {} files", sums.size(), files.size()));
  }
  for (size_t i = 0; i < sums.size(); ++i) {
    m.tokenizer_crc32.push_back(static_cast<uint32_t>(
        f.as_integer(sums[i], fmt::format("tokenizer.crc32[{}]", i), 0, UINT32_MAX)));
  }
  const json& chat = f.member(tok, "tokenizer", "chat_template");
  if (!chat.is_null()) m.chat_template = f.as_string(chat, "tokenizer.chat_template");
}

}  // namespace

std::string bank_file_name(uint32_t layer) {
  return fmt::format("experts-L{:03}.bin", layer);
}

bool known_arch(std::string_view arch) {
  return find_family(arch) != nullptr;
}

uint32_t manifest_crc32(const json& root) {
  json rest = root;
  if (rest.is_object()) rest.erase("manifest_crc32");
  const std::string text = rest.dump();
  return crc32_bytes(text.data(), text.size());
}

uint32_t records_digest(const std::vector<uint32_t>& record_crcs) {
  uint32_t digest = 0;
  for (const uint32_t crc : record_crcs) {
    const uint8_t bytes[4] = {static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8),
                              static_cast<uint8_t>(crc >> 16), static_cast<uint8_t>(crc >> 24)};
    digest = crc32_bytes(bytes, sizeof bytes, digest);
  }
  return digest;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

Manifest parse_manifest(std::string_view bytes, const std::string& path) {
  json root;
  try {
    root = json::parse(bytes);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number no double holds (1e309).
    fail("{}: not valid JSON: {}", path, e.what());
  }
  const Fields f(path);
  if (!root.is_object())
    f.bad("the top level", fmt::format("must be an object, found {}", root.type_name()));
  f.expect_string(root, "", "format", "sluice");
  const uint64_t version = f.integer(root, "", "format_version", 0, UINT64_MAX);
  if (version != kContainerFormatVersion) {
    fail("{}: format_version {} is not supported (this build reads format_version {}{})", path,
         version, kContainerFormatVersion,
         version < kContainerFormatVersion ? "; convert the checkpoint again" : "");
  }
  Manifest m;
  m.arch = f.string(root, "", "arch");
  if (!known_arch(m.arch)) {
    fail("{}: unknown arch \"{}\" (this build runs {})", path, m.arch, supported_architectures());
  }
  parse_config(f, root, m, path);
  parse_expert_quant(f, root, m);
  const json& source = f.member(root, "", "source");
  if (!source.is_object())
    f.bad("source", fmt::format("must be an object, found {}", source.type_name()));
  parse_trunk(f, root, m);
  parse_codebooks(f, root, m);
  parse_moe_layers(f, root, m);
  parse_tokenizer(f, root, m);
  // Last, so a manifest refused for a field names that field.
  const uint32_t recorded = f.crc(root, "", "manifest_crc32");
  const uint32_t computed = manifest_crc32(root);
  if (recorded != computed) {
    fail("{}: checksum mismatch: manifest_crc32 is {:08x} but the manifest's content sums to {:08x}; "
         "the manifest was damaged or edited",
         path, recorded, computed);
  }
  m.identity = fnv1a64(bytes);
  return m;
}

}  // namespace sluice
