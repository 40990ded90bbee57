// tests/fuzz/fuzz_targets.cpp: the targets and their seed inputs. Seeds are
// built here (the manifest by the hand-written container fixture), so a run
// needs no files.
#include "tests/fuzz/fuzz_targets.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "compute/convert/safetensors.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "proto/file_io.h"
#include "proto/manifest.h"
#include "proto/record_format.h"
#include "proto/sluice_io.capnp.h"
#include "tests/proto/container_fixture.h"

namespace sluice::fuzz {
namespace {

std::string slurp(const std::string& path) {
  auto file = posix_file_system().open(path, OpenMode::kBuffered);
  std::string bytes(file->size(), '\0');
  read_exact(*file, 0, bytes.data(), bytes.size());
  return bytes;
}

// --- manifest.json -------------------------------------------------------

bool run_manifest(const uint8_t* data, size_t size) {
  try {
    parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size),
                   "fuzz/manifest.json");
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> manifest_seeds() {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  return {slurp(fx.manifest_path())};
}

// --- expert record headers -----------------------------------------------

// One record of the fixture's geometry (hidden 32, width 24): the header
// checks, then the payload crc32 only over bytes the header may claim.
const RecordLayout& fuzz_layout() {
  static const RecordLayout layout = RecordLayout::compute(32, 24);
  return layout;
}

bool run_record(const uint8_t* data, size_t size) {
  const RecordLayout& layout = fuzz_layout();
  std::vector<uint8_t> record(layout.stride, 0);
  std::memcpy(record.data(), data, std::min<size_t>(size, record.size()));
  const RecordHeader found = RecordHeader::decode(record.data());
  if (check_header(found, expected_header(layout, 1, 3, 9))) return false;
  return payload_crc32(record.data(), found.payload_end) == found.crc32;
}

std::vector<std::string> record_seeds() {
  const RecordLayout& layout = fuzz_layout();
  std::string record(layout.payload_end, '\0');
  for (size_t i = 64; i < record.size(); ++i) record[i] = static_cast<char>(i * 7);
  RecordHeader header = expected_header(layout, 1, 3, 9);
  header.crc32 = payload_crc32(reinterpret_cast<const uint8_t*>(record.data()), layout.payload_end);
  header.encode(reinterpret_cast<uint8_t*>(record.data()));
  return {record};
}

// --- safetensors ---------------------------------------------------------

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : bytes_(data, data + size) {}
  size_t read_at(uint64_t offset, void* destination, size_t length) override {
    if (offset >= bytes_.size()) return 0;
    const size_t n = std::min<uint64_t>(length, bytes_.size() - offset);
    std::memcpy(destination, bytes_.data() + offset, n);
    return n;
  }
  uint64_t size() const override { return bytes_.size(); }
  const std::string& path() const override { return path_; }
  bool direct() const override { return false; }

 private:
  std::vector<uint8_t> bytes_;
  std::string path_ = "fuzz/model.safetensors";
};

bool run_safetensors(const uint8_t* data, size_t size) {
  try {
    convert::SafetensorsFile file(std::make_unique<MemoryFile>(data, size), "model.safetensors");
    for (const convert::TensorInfo& info : file.tensors()) {
      std::vector<float> values(info.elements);
      file.read_f32(info, values.data());
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string safetensors_file(const nlohmann::json& header, size_t data_bytes) {
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{text.size()} >> (8 * i));
  out += text;
  for (size_t i = 0; i < data_bytes; ++i) out += static_cast<char>(0x3c + i % 3);
  return out;
}

std::vector<std::string> safetensors_seeds() {
  const nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"a.weight", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}},
      {"b.weight", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {12, 28}}}},
      {"c.weight", {{"dtype", "F16"}, {"shape", {2, 2}}, {"data_offsets", {28, 36}}}}};
  return {safetensors_file(header, 36)};
}

// --- tokenizer.json ------------------------------------------------------

bool run_tokenizer(const uint8_t* data, size_t size) {
  try {
    const auto tok = tokenizer::Tokenizer::from_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    const auto ids = tok.encode("hello hell");
    (void)tok.decode_bytes(ids);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> tokenizer_seeds() {
  const nlohmann::json byte_level = nlohmann::json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 6, "content": "<s>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
              "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "he": 4, "ll": 5, "\u0120": 7},
              "merges": ["h e", "l l"]}})");
  return {byte_level.dump(), byte_level.dump(2)};
}

// --- Cap'n Proto messages ------------------------------------------------

template <typename Reader>
void touch_stats(Reader stats) {
  uint64_t sum = stats.getHits() + stats.getMisses() + stats.getBytesRead();
  for (auto layer : stats.getLayers()) sum += layer.getHits() + layer.getLayer();
  for (auto client : stats.getClients())
    sum += client.getRequests() + static_cast<uint64_t>(client.getPid());
  sum += stats.getInstance().size() + stats.getModel().size() + stats.getSegmentName().size();
  for (auto guess : stats.getLookahead().getLayers()) sum += guess.getScored();
  (void)sum;
}

bool run_capnp(const uint8_t* data, size_t size) {
  if (size < 1) return false;
  // First byte picks the message type (the daemon's replies, then the
  // requests it reads); the rest is the framed message.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>((size - 1 + 7) / 8);
  std::memset(words.begin(), 0, words.size() * sizeof(capnp::word));
  std::memcpy(words.begin(), data + 1, size - 1);
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 1 << 20;
    capnp::FlatArrayMessageReader reader(words, options);
    switch (data[0] % 4) {
      case 0: {
        const auto result = reader.getRoot<rpc::AttachResult>();
        if (result.isRefused()) return result.getRefused().size() > 0;
        const auto attached = result.getAttached();
        const auto g = attached.getGeometry();
        return attached.getSegmentName().size() + g.getSlotCount() + g.getMailboxIds() > 0;
      }
      case 1:
        touch_stats(reader.getRoot<rpc::Stats>());
        return true;
      case 2: {
        // What sluice-io reads of a prefetch, in its order: the size first.
        const auto params = reader.getRoot<rpc::SluiceIo::PrefetchParams>();
        if (params.getExperts().size() > kMaxExpertsPerLayer) return false;
        uint64_t sum = params.getLayer();
        for (uint32_t expert : params.getExperts()) sum += expert;
        return sum > 0 && params.getOrigin() == rpc::PrefetchOrigin::ROUTER;
      }
      default: {
        const auto attach = reader.getRoot<rpc::SluiceIo::AttachParams>();
        return attach.getVerify() &&
               attach.getIdentity() + static_cast<uint64_t>(attach.getPid()) > 0;
      }
    }
  } catch (const kj::Exception&) {
    return false;
  }
}

std::string framed(uint8_t kind, capnp::MessageBuilder& message) {
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  std::string out(1, static_cast<char>(kind));
  out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  return out;
}

std::vector<std::string> capnp_seeds() {
  std::vector<std::string> seeds;
  {
    capnp::MallocMessageBuilder message;
    auto attached = message.initRoot<rpc::AttachResult>().initAttached();
    attached.setSegmentName("sluice-0-default");
    attached.initGeometry().setSlotCount(16);
    attached.setIdentity(0x1234);
    seeds.push_back(framed(0, message));
  }
  {
    capnp::MallocMessageBuilder message;
    message.initRoot<rpc::AttachResult>().setRefused("serves another container");
    seeds.push_back(framed(0, message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto params = message.initRoot<rpc::SluiceIo::PrefetchParams>();
    params.setLayer(2);
    auto experts = params.initExperts(3);
    for (unsigned i = 0; i < experts.size(); ++i) experts.set(i, 5 * i + 1);
    params.setOrigin(rpc::PrefetchOrigin::ROUTER);
    seeds.push_back(framed(2, message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto params = message.initRoot<rpc::SluiceIo::AttachParams>();
    params.setPid(1234);
    params.setIdentity(0xfeed);
    params.setVerify(true);
    seeds.push_back(framed(3, message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto stats = message.initRoot<rpc::Stats>();
    stats.setHits(5);
    stats.setInstance("default");
    auto layers = stats.initLayers(2);
    layers[1].setLayer(3);
    stats.initClients(1)[0].setPid(42);
    stats.initLookahead().initLayers(1)[0].setScored(9);
    seeds.push_back(framed(1, message));
  }
  return seeds;
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    std::vector<Target> targets = {
        {"manifest", run_manifest, manifest_seeds, true},
        {"record_header", run_record, record_seeds, false},
        {"safetensors", run_safetensors, safetensors_seeds, false},
        {"tokenizer", run_tokenizer, tokenizer_seeds, true},
        {"capnp", run_capnp, capnp_seeds, false},
    };
    for (Target& target : text_targets()) targets.push_back(std::move(target));
    return targets;
  }();
  return all;
}

const Target* find_target(const std::string& name) {
  for (const Target& target : targets()) {
    if (name == target.name) return &target;
  }
  return nullptr;
}

}  // namespace sluice::fuzz
