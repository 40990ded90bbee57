// compute/tokenizer/tiktoken.cpp: reads an untrusted tiktoken rank file (and
// tokenizer_config.json's special-token names) into a Tokenizer. Every line is
// checked and an error names the file and line; nothing is guessed or skipped
// except blank lines, which tiktoken skips too.
#include <optional>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "compute/tokenizer/json_reader.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/tokenizer_impl.h"
#include "proto/base64.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

using nlohmann::json;

// tokenization_kimi.py's num_reserved_special_tokens: the ids right after
// the ranks, each named by added_tokens_decoder or <|reserved_token_{id}|>.
constexpr size_t kReservedSpecials = 256;

struct RankLine {
  uint32_t line;    // 1-based, for messages
  uint32_t offset;  // of the decoded bytes in the scratch arena
  uint32_t length;
};

class RankFileReader {
 public:
  RankFileReader(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  // Parses every line into `by_rank` (dense 0..n-1) over `decoded`.
  void read(std::vector<RankLine>& by_rank, std::string& decoded) const {
    const size_t n = count_tokens();
    if (n == 0) fail("{}: no tokens (expected lines of `base64 rank`)", name_);
    if (n + kReservedSpecials > static_cast<size_t>(kMaxTokenId) + 1) {
      fail("{}: {} tokens is more than the {} ids a tokenizer may have", name_, n, kMaxTokenId + 1);
    }
    by_rank.assign(n, RankLine{0, 0, 0});
    decoded.reserve(text_.size());
    uint32_t line_number = 0;
    for (size_t pos = 0; pos < text_.size();) {
      const std::string_view line = next_line(pos);
      ++line_number;
      if (line.empty()) continue;
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || space == 0 ||
          line.find(' ', space + 1) != std::string_view::npos) {
        fail("{}:{}: expected `base64 rank` (two fields, one space), got {}", name_, line_number,
             shown(line));
      }
      const std::string_view rank_text = line.substr(space + 1);
      uint64_t rank = 0;
      const auto [end, ec] =
          std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
      if (ec != std::errc() || end != rank_text.data() + rank_text.size()) {
        fail("{}:{}: rank {} is not a non-negative integer", name_, line_number, shown(rank_text));
      }
      if (rank >= n) {
        fail(
            "{}:{}: rank {} leaves the ids not dense: the file has {} tokens, so its ranks must be "
            "0..{}",
            name_, line_number, rank, n, n - 1);
      }
      RankLine& slot = by_rank[rank];
      if (slot.line != 0)
        fail("{}:{}: rank {} was already given on line {}", name_, line_number, rank, slot.line);
      const size_t before = decoded.size();
      std::string why;
      const std::optional<std::string> token = decode_base64(line.substr(0, space), {}, &why);
      if (!token) {
        fail("{}:{}: token {} is not valid base64: {}", name_, line_number, shown(line.substr(0, space)), why);
      }
      decoded += *token;
      slot = {line_number, static_cast<uint32_t>(before),
              static_cast<uint32_t>(decoded.size() - before)};
    }
  }

 private:
  // Lines end at '\n' with an optional '\r' before it, as splitlines reads them.
  std::string_view next_line(size_t& pos) const {
    const char* start = text_.data() + pos;
    const void* newline = std::memchr(start, '\n', text_.size() - pos);
    const size_t end = newline
                           ? static_cast<size_t>(static_cast<const char*>(newline) - text_.data())
                           : text_.size();
    std::string_view line = text_.substr(pos, end - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    pos = end + 1;
    return line;
  }

  size_t count_tokens() const {
    size_t n = 0;
    for (size_t pos = 0; pos < text_.size();) {
      if (!next_line(pos).empty()) ++n;
    }
    return n;
  }

  static std::string shown(std::string_view s) {
    constexpr size_t kShown = 40;
    return json(std::string(s.substr(0, kShown)) + (s.size() > kShown ? "..." : ""))
        .dump(-1, ' ', false, json::error_handler_t::replace);
  }

  std::string_view text_;
  std::string name_;
};

void read_ranks(std::string_view text, std::string_view name, Tokenizer::Impl& impl) {
  std::vector<RankLine> by_rank;
  std::string decoded;
  RankFileReader(text, name).read(by_rank, decoded);
  RankBpe& ranks = impl.model.emplace<RankBpe>();
  ranks.reserve(by_rank.size(), decoded.size());
  impl.entries.resize(by_rank.size() + kReservedSpecials);
  for (size_t rank = 0; rank < by_rank.size(); ++rank) {
    const RankLine& r = by_rank[rank];
    const std::string_view bytes = std::string_view(decoded).substr(r.offset, r.length);
    if (const auto earlier = ranks.add(bytes)) {
      fail("{}:{}: token repeats the bytes of rank {} on line {}", name, r.line, *earlier,
           by_rank[*earlier].line);
    }
    auto& entry = impl.entries[rank];
    entry.present = true;
    entry.bytes = bytes;
    entry.text = bytes_to_byte_level(bytes);
  }
  for (int byte = 0; byte < 256; ++byte) {
    if (!ranks.has_byte(static_cast<uint8_t>(byte))) {
      fail("{}: no token for the single byte 0x{:02X}; byte-level BPE needs all 256", name, byte);
    }
  }
}

// Names the reserved ids from added_tokens_decoder and makes all of them
// special tokens recognised by encode_with_specials.
void read_specials(const json* config, std::string_view config_name, Tokenizer::Impl& impl) {
  const auto first = static_cast<TokenId>(impl.entries.size() - kReservedSpecials);
  const auto last = static_cast<TokenId>(impl.entries.size() - 1);
  std::vector<AddedToken> specials(kReservedSpecials);
  for (size_t i = 0; i < kReservedSpecials; ++i) {
    specials[i].id = first + static_cast<TokenId>(i);
    specials[i].content = fmt::format("<|reserved_token_{}|>", specials[i].id);
    specials[i].special = true;
  }
  const json* decoder = nullptr;
  if (config) {
    const auto it = config->find("added_tokens_decoder");
    if (it != config->end() && !it->is_null()) decoder = &*it;
  }
  if (decoder) {
    const Reader r(config_name);
    if (!decoder->is_object()) fail("{}: added_tokens_decoder is not an object", config_name);
    for (const auto& [key, node] : decoder->items()) {
      const std::string where = fmt::format("added_tokens_decoder[{}]", json(key).dump());
      TokenId id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size())
        fail("{}: {}: the key is not an id", config_name, where);
      if (id < first || id > last) {
        fail("{}: {}: id {} is outside the special ids {}..{} that follow the {} ranks",
             config_name, where, id, first, last, first);
      }
      AddedToken& token = specials[static_cast<size_t>(id - first)];
      token.content = r.string_of(r.member(node, "content", where), where + ".content");
      if (token.content.empty()) fail("{}: {}.content is empty", config_name, where);
      token.special = r.bool_or(node, "special", true, where);
      token.lstrip = r.bool_or(node, "lstrip", false, where);
      token.rstrip = r.bool_or(node, "rstrip", false, where);
      token.single_word = r.bool_or(node, "single_word", false, where);
    }
  }
  for (const AddedToken& token : specials) {
    const auto [it, fresh] = impl.added_vocab.emplace(token.content, token.id);
    if (!fresh) {
      fail("{}: special ids {} and {} are both named {}", config_name, it->second, token.id,
           json(token.content).dump());
    }
    auto& entry = impl.entries[token.id];
    entry.present = true;
    entry.text = token.content;
    entry.bytes = token.content;
    entry.special = token.special;
  }
  impl.raw_added = AddedTokenMatcher(std::move(specials));
}

SplitPattern split_pattern_of(TiktokenPattern pattern) {
  switch (pattern) {
    case TiktokenPattern::kCl100k:
      return SplitPattern::kCl100k;
    case TiktokenPattern::kO200k:
      return SplitPattern::kO200k;
    case TiktokenPattern::kKimi:
      break;
  }
  return SplitPattern::kKimi;
}

}  // namespace

Tokenizer Tokenizer::from_tiktoken(std::string_view ranks, std::string_view ranks_name,
                                   std::string_view config_json, std::string_view config_name,
                                   TiktokenPattern pattern) {
  auto impl = std::make_unique<Impl>();
  impl->source = ranks_name;
  impl->pre_tokenizer =
      PreTokenizer({{PreTokenizerStep::Kind::kSplit, split_pattern_of(pattern), false, false}});
  impl->kimi_chunks = pattern == TiktokenPattern::kKimi;
  read_ranks(ranks, ranks_name, *impl);
  if (config_json.empty()) {
    read_specials(nullptr, config_name, *impl);
  } else {
    const json config = parse_config(config_json, config_name);
    read_specials(&config, config_name, *impl);
    read_token_config(config, config_name, *impl);
  }
  return Tokenizer(std::move(impl));
}

}  // namespace sluice::tokenizer
