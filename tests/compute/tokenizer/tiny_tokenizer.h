// tests/compute/tokenizer/tiny_tokenizer.h: builds small tokenizer.json texts
// and tiktoken rank files for the unit tests (ids 0..255 are the bytes in byte
// order, merged or extra tokens follow in order), so expected ids can be
// worked out by hand.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "compute/tokenizer/bpe.h"
#include "tests/compute/tokenizer/reference_inputs.h"

namespace tiny {

inline nlohmann::json gpt2_byte_level() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
}

struct Spec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, merged in this order
  nlohmann::json added = nlohmann::json::array();
  nlohmann::json pre_tokenizer = gpt2_byte_level();
  nlohmann::json normalizer = nullptr;
  bool ignore_merges = false;
  std::vector<std::string> extra_tokens;  // raw bytes, after the merged tokens
};

inline int merged_id(size_t merge_index) { return 256 + static_cast<int>(merge_index); }

inline nlohmann::json json_of(const Spec& spec) {
  using sluice::tokenizer::bytes_to_byte_level;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  nlohmann::json merges = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : spec.merges) {
    merges.push_back(bytes_to_byte_level(a) + " " + bytes_to_byte_level(b));
    vocab[bytes_to_byte_level(a + b)] = next++;
  }
  for (const auto& t : spec.extra_tokens) vocab[bytes_to_byte_level(t)] = next++;
  return {{"version", "1.0"},
          {"added_tokens", spec.added},
          {"normalizer", spec.normalizer},
          {"pre_tokenizer", spec.pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", gpt2_byte_level()},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", spec.ignore_merges},
            {"vocab", vocab}, {"merges", merges}}}};
}

inline nlohmann::json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A tiktoken.model text: rank b is the byte b, then `extra` from rank 256.
inline std::string tiktoken_ranks(const std::vector<std::string>& extra) {
  std::string out;
  int rank = 0;
  for (int b = 0; b < 256; ++b) {
    out += sluice::test_inputs::base64_encode(std::string(1, static_cast<char>(b))) + " " +
           std::to_string(rank++) + "\n";
  }
  for (const auto& t : extra)
    out += sluice::test_inputs::base64_encode(t) + " " + std::to_string(rank++) + "\n";
  return out;
}

// Kimi's rank count (163,584) made of the 256 bytes, every byte pair, then
// byte triples: the size of the real file with none of its contents.
inline std::string kimi_sized_ranks() {
  constexpr size_t kRanks = 163584;
  std::vector<std::string> extra;
  extra.reserve(kRanks - 256);
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) extra.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  for (int a = 0; extra.size() < kRanks - 256; ++a) {
    for (int b = 0; b < 256 && extra.size() < kRanks - 256; ++b) {
      for (int c = 0; c < 256 && extra.size() < kRanks - 256; ++c) {
        extra.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
      }
    }
  }
  return tiktoken_ranks(extra);
}

}  // namespace tiny
