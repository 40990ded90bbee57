// compute/tokenizer/tokenizer_json.cpp: reads an untrusted tokenizer.json (and
// tokenizer_config.json) into a Tokenizer. Every field is type- and
// range-checked; anything it cannot honour exactly is refused by name.
#include <malloc.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "compute/tokenizer/json_reader.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/tokenizer_impl.h"
#include "compute/tokenizer/unicode.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

using nlohmann::json;

Tokenizer::Impl::Entry& entry_for(Tokenizer::Impl& impl, TokenId id) {
  if (static_cast<size_t>(id) >= impl.entries.size()) impl.entries.resize(static_cast<size_t>(id) + 1);
  return impl.entries[id];
}

void read_normalizer(const Reader& r, const json& node, std::string_view where, Tokenizer::Impl& impl) {
  if (node.is_null()) return;
  const std::string type = r.type_of(node, where);
  if (type == "NFC") {
    impl.nfc = true;
  } else if (type == "Sequence") {
    const json& list = r.member(node, "normalizers", where);
    if (!list.is_array()) fail("{}: {}.normalizers is not a list", r.file(), where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_normalizer(r, list[i], fmt::format("{}.normalizers[{}]", where, i), impl);
    }
  } else {
    fail("{}: {} is a \"{}\" normalizer; only NFC and Sequence are supported", r.file(), where, type);
  }
}

void read_pre_tokenizer(const Reader& r, const json& node, std::string_view where,
                        std::vector<PreTokenizerStep>& steps) {
  if (node.is_null()) return;
  const std::string type = r.type_of(node, where);
  if (type == "Sequence") {
    const json& list = r.member(node, "pretokenizers", where);
    if (!list.is_array()) fail("{}: {}.pretokenizers is not a list", r.file(), where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", where, i), steps);
    }
  } else if (type == "ByteLevel") {
    // Hugging Face's defaults when the fields are missing.
    steps.push_back({PreTokenizerStep::Kind::kByteLevel, SplitPattern::kGpt2,
                     r.bool_or(node, "use_regex", true, where), r.bool_or(node, "add_prefix_space", true, where)});
  } else if (type == "Split") {
    const json& pattern = r.member(node, "pattern", where);
    if (!pattern.is_object() || !pattern.contains("Regex")) {
      fail("{}: {}.pattern is not a {{\"Regex\": ...}} object; string patterns are not supported", r.file(), where);
    }
    const std::string regex = r.string_of(pattern["Regex"], std::string(where) + ".pattern.Regex");
    const auto recognised = recognise_split_pattern(regex);
    if (!recognised) {
      fail("{}: {}.pattern.Regex {} is not one of the recognised GPT-2, Qwen2 or DeepSeek-V3 split patterns",
           r.file(), where, json(regex).dump());
    }
    const std::string behavior = r.string_of(r.member(node, "behavior", where), std::string(where) + ".behavior");
    if (behavior != "Isolated") fail("{}: {}.behavior is \"{}\"; only Isolated is supported", r.file(), where, behavior);
    if (r.bool_or(node, "invert", false, where)) fail("{}: {}.invert is true; not supported", r.file(), where);
    steps.push_back({PreTokenizerStep::Kind::kSplit, *recognised, false, false});
  } else {
    fail("{}: {} is a \"{}\" pre-tokenizer; only Split, ByteLevel and Sequence are supported", r.file(), where, type);
  }
}

void check_decoder(const Reader& r, const json& node) {
  if (node.is_null()) fail("{}: decoder is null; a ByteLevel decoder is required", r.file());
  const std::string type = r.type_of(node, "decoder");
  if (type != "ByteLevel") fail("{}: decoder is \"{}\"; only ByteLevel is supported", r.file(), type);
}

void read_model(const Reader& r, const json& model, Tokenizer::Impl& impl) {
  if (!model.is_object()) fail("{}: model is not an object", r.file());
  if (model.contains("type") && r.type_of(model, "model") != "BPE") {
    fail("{}: model.type is \"{}\"; only BPE is supported", r.file(), r.type_of(model, "model"));
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    fail("{}: model.dropout is set; BPE dropout is not supported", r.file());
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(affix) && !model[affix].is_null() &&
        r.string_of(model[affix], std::string("model.") + affix) != "") {
      fail("{}: model.{} is set; not supported for byte-level BPE", r.file(), affix);
    }
  }
  BpeModel& bpe = impl.model.emplace<BpeModel>(r.bool_or(model, "ignore_merges", false, "model"));

  const json& vocab = r.member(model, "vocab", "model");
  if (!vocab.is_object()) fail("{}: model.vocab is not an object", r.file());
  impl.model_vocab.reserve(vocab.size());
  for (const auto& [text, value] : vocab.items()) {
    const std::string where = fmt::format("model.vocab[{}]", json(text).dump());
    if (!is_valid_utf8(text)) fail("{}: {} is not valid UTF-8", r.file(), where);
    const TokenId id = r.id_of(value, where);
    auto& entry = entry_for(impl, id);
    if (entry.present) fail("{}: {} reuses id {} of {}", r.file(), where, id, json(entry.text).dump());
    entry.present = true;
    entry.text = text;
    impl.model_vocab.emplace(text, id);
    if (auto bytes = byte_level_to_bytes(text)) {
      entry.bytes = *bytes;
      bpe.add_token(std::move(*bytes), id);
    } else {
      entry.bytes = text;  // not spelled in byte-level characters: decodes as itself
    }
  }

  const json& merges = r.member(model, "merges", "model");
  if (!merges.is_array()) fail("{}: model.merges is not a list", r.file());
  auto lookup = [&](const std::string& token, size_t rank) {
    const auto it = impl.model_vocab.find(token);
    if (it == impl.model_vocab.end()) {
      fail("{}: model.merges[{}] uses {}, which is not in model.vocab", r.file(), rank, json(token).dump());
    }
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& merge = merges[rank];
    const std::string where = fmt::format("model.merges[{}]", rank);
    std::string left, right;
    if (merge.is_string()) {
      const std::string line = r.string_of(merge, where);
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail("{}: {} is {}, not two tokens separated by one space", r.file(), where, json(line).dump());
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = r.string_of(merge[0], where + "[0]");
      right = r.string_of(merge[1], where + "[1]");
    } else {
      fail("{}: {} is neither \"a b\" nor [a, b]", r.file(), where);
    }
    const TokenId left_id = lookup(left, rank);
    const TokenId right_id = lookup(right, rank);
    bpe.add_merge(left_id, right_id, lookup(left + right, rank));
  }
}

void read_added_tokens(const Reader& r, const json& root, Tokenizer::Impl& impl) {
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) fail("{}: added_tokens is not a list", r.file());
  std::vector<AddedToken> raw, normalized;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& node = (*it)[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    AddedToken token;
    token.id = r.id_of(r.member(node, "id", where), where + ".id");
    token.content = r.string_of(r.member(node, "content", where), where + ".content");
    if (token.content.empty()) fail("{}: {}.content is empty", r.file(), where);
    token.special = r.bool_or(node, "special", false, where);
    token.normalized = r.bool_or(node, "normalized", !token.special, where);
    token.lstrip = r.bool_or(node, "lstrip", false, where);
    token.rstrip = r.bool_or(node, "rstrip", false, where);
    token.single_word = r.bool_or(node, "single_word", false, where);
    auto& entry = entry_for(impl, token.id);
    entry.present = true;
    entry.text = token.content;
    entry.bytes = token.content;
    entry.special = token.special;
    impl.added_vocab[token.content] = token.id;
    (token.normalized && impl.nfc ? normalized : raw).push_back(std::move(token));
  }
  impl.raw_added = AddedTokenMatcher(std::move(raw));
  impl.normalized_added = AddedTokenMatcher(std::move(normalized));
}

}  // namespace

namespace {

std::unique_ptr<Tokenizer::Impl> read_tokenizer_json(std::string_view tokenizer_json, std::string_view tokenizer_name,
                                                     std::string_view config_json, std::string_view config_name) {
  const Reader r(tokenizer_name);
  const json root = r.parse(tokenizer_json);
  if (!root.is_object()) fail("{}: the top level is not an object", tokenizer_name);
  auto impl = std::make_unique<Tokenizer::Impl>();
  read_normalizer(r, root.value("normalizer", json()), "normalizer", *impl);
  std::vector<PreTokenizerStep> steps;
  read_pre_tokenizer(r, root.value("pre_tokenizer", json()), "pre_tokenizer", steps);
  const bool byte_level = std::any_of(steps.begin(), steps.end(), [](const PreTokenizerStep& s) {
    return s.kind == PreTokenizerStep::Kind::kByteLevel;
  });
  if (!byte_level) fail("{}: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", tokenizer_name);
  impl->pre_tokenizer = PreTokenizer(std::move(steps));
  check_decoder(r, root.value("decoder", json()));
  read_model(r, r.member(root, "model", "the top level"), *impl);
  read_added_tokens(r, root, *impl);

  if (!config_json.empty())
    read_token_config(parse_config(config_json, config_name), config_name, *impl);
  return impl;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_name,
                               std::string_view config_json, std::string_view config_name) {
  auto impl = read_tokenizer_json(tokenizer_json, tokenizer_name, config_json, config_name);
  impl->source = tokenizer_name;
  // The parsed document is gone, but its million small blocks stay in the
  // allocator's arenas (51 MB of RSS for Qwen3's tokenizer) unless returned;
  // the memory plan counts only what the tokenizer keeps.
  malloc_trim(0);
  return Tokenizer(std::move(impl));
}

}  // namespace sluice::tokenizer
