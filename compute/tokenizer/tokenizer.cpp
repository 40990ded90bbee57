// compute/tokenizer/tokenizer.cpp: encode (repair, Kimi's cuts, added tokens,
// normalize, pre-tokenize, BPE by merges or tiktoken ranks) and decode.
// Content text never reaches the added-token matchers, so it can never become
// a control token.
#include "compute/tokenizer/tokenizer.h"

#include <cstdint>
#include <variant>

#include "compute/tokenizer/tokenizer_impl.h"
#include "compute/tokenizer/unicode.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

void encode_plain(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out) {
  // Pieces index code points with 32 bits.
  if (text.size() > UINT32_MAX) fail("tokenizer: text of {} bytes is too long to encode at once", text.size());
  std::u32string chars;
  decode_utf8(text, chars);
  std::vector<Piece> pieces;
  impl.pre_tokenizer.split(chars, pieces);
  std::string bytes;
  for (const Piece& piece : pieces) {
    bytes.clear();
    for (uint32_t i = piece.begin; i < piece.end; ++i) append_utf8(bytes, chars[i]);
    std::visit([&](const auto& model) { model.encode(bytes, out); }, impl.model);
  }
}

void encode_section(const Tokenizer::Impl& impl, std::string_view raw, bool specials, std::vector<TokenId>& out) {
  const std::string normalized = impl.nfc ? nfc(raw) : std::string(raw);
  if (!specials || impl.normalized_added.empty()) {
    encode_plain(impl, normalized, out);
    return;
  }
  std::vector<Segment> segments;
  impl.normalized_added.split(normalized, segments);
  for (const Segment& s : segments) {
    if (s.token >= 0) {
      out.push_back(impl.normalized_added.token(s.token).id);
    } else {
      encode_plain(impl, std::string_view(normalized).substr(s.begin, s.end - s.begin), out);
    }
  }
}

void encode_chunk(const Tokenizer::Impl& impl, std::string_view valid, bool specials,
                  std::vector<TokenId>& out) {
  if (!specials || impl.raw_added.empty()) {
    encode_section(impl, valid, specials, out);
    return;
  }
  std::vector<Segment> segments;
  impl.raw_added.split(valid, segments);
  for (const Segment& s : segments) {
    if (s.token >= 0) {
      out.push_back(impl.raw_added.token(s.token).id);
    } else {
      encode_section(impl, valid.substr(s.begin, s.end - s.begin), specials, out);
    }
  }
}

// tokenization_kimi.py hands tiktoken at most 400,000 code points at a time
// and cuts every run of more than 25,000 spaces or non-spaces (str.isspace);
// neither the pattern nor a special token reaches across a cut.
constexpr size_t kKimiWindow = 400000;
constexpr size_t kKimiMaxRun = 25000;

void cut_as_kimi_does(std::string_view valid, std::vector<std::string_view>& chunks) {
  size_t window_start = 0, slice_start = 0, in_window = 0, run = 0;
  bool run_is_space = false;
  for (size_t i = 0; i < valid.size();) {
    size_t length = 0;
    const char32_t c = code_point_at(valid, i, length);
    if (in_window == kKimiWindow) {
      chunks.push_back(valid.substr(slice_start, i - slice_start));
      window_start = slice_start = i;
      in_window = 0;
    }
    const bool space = is_python_space(c);
    if (i == window_start || space != run_is_space) {
      run = 1;
      run_is_space = space;
    } else if (++run > kKimiMaxRun) {
      chunks.push_back(valid.substr(slice_start, i - slice_start));
      slice_start = i;
      run = 1;
    }
    ++in_window;
    i += length;
  }
  chunks.push_back(valid.substr(slice_start));
}

std::vector<TokenId> encode_text(const Tokenizer::Impl& impl, std::string_view text,
                                 bool specials) {
  const std::string valid = repair_utf8(text);
  std::vector<TokenId> out;
  out.reserve(valid.size() / 3 + 4);
  // A text of at most kKimiMaxRun bytes has no run to cut.
  if (!impl.kimi_chunks || valid.size() <= kKimiMaxRun) {
    encode_chunk(impl, valid, specials, out);
    return out;
  }
  std::vector<std::string_view> chunks;
  cut_as_kimi_does(valid, chunks);
  for (std::string_view chunk : chunks) encode_chunk(impl, chunk, specials, out);
  return out;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text) const { return encode_text(*impl_, text, false); }

std::vector<TokenId> Tokenizer::encode_with_specials(std::string_view text) const {
  return encode_text(*impl_, text, true);
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->entries.size() || !impl_->entries[id].present) {
    fail("tokenizer: token id {} is not in the vocabulary (size {})", id, impl_->entries.size());
  }
  return impl_->entries[id].bytes;
}

std::string Tokenizer::decode_bytes(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    const std::string& bytes = token_bytes(id);
    if (skip_special && impl_->entries[id].special) continue;
    out += bytes;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  return repair_utf8(decode_bytes(ids, skip_special));
}

std::optional<TokenId> Tokenizer::Impl::find_token(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_vocab.find(key); it != added_vocab.end()) return it->second;
  if (const auto* ranks = std::get_if<RankBpe>(&model)) {
    const auto bytes = byte_level_to_bytes(token);
    return bytes ? ranks->find(*bytes) : std::nullopt;
  }
  if (auto it = model_vocab.find(key); it != model_vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->find_token(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->entries.size() || !impl_->entries[id].present) {
    return std::nullopt;
  }
  return impl_->entries[id].text;
}

const std::string& Tokenizer::loaded_from() const { return impl_->source; }

size_t Tokenizer::vocab_size() const { return impl_->entries.size(); }

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->entries.size() && impl_->entries[id].special;
}

bool Tokenizer::is_added(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->entries.size() || !impl_->entries[id].present) {
    return false;
  }
  const auto it = impl_->added_vocab.find(impl_->entries[id].text);
  return it != impl_->added_vocab.end() && it->second == id;
}

std::optional<TokenId> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<TokenId> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }

std::string StreamingDecoder::push(TokenId id) {
  const std::string& bytes = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += bytes;
  const size_t complete = complete_utf8_prefix(pending_);
  std::string out = repair_utf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out = repair_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace sluice::tokenizer
