// compute/tokenizer/compiled_tokenizer.cpp: a loaded tokenizer written as
// flat arrays (tokenizer.bin, proto/FORMAT.md) and read back in one pass.
// Every count, offset and size of an untrusted file is checked before use; a
// damaged file is refused by name, never half-loaded.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <variant>

#include "compute/tokenizer/json_reader.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/tokenizer_impl.h"
#include "compute/tokenizer/unicode.h"
#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

static_assert(std::endian::native == std::endian::little, "the compiled form is little-endian");

constexpr uint32_t kMagic = 0x4B544C53;  // "SLTK"
constexpr size_t kHeaderBytes = 64;
constexpr size_t kCrcOffset = 60;
constexpr size_t kStepBytes = 4;
constexpr size_t kEntryBytes = 20;  // text off/len, bytes off/len, flags
constexpr size_t kVocabBytes = 24;  // text off/len, bytes off/len, id, flags
constexpr size_t kMergeBytes = 12;  // left, right, merged
constexpr size_t kAddedBytes = 16;  // id, content off/len, flags
constexpr size_t kNameBytes = 12;   // content off/len, id
constexpr uint32_t kMaxSteps = 16;

enum HeaderFlag : uint32_t {
  kNfc = 1,
  kKimiChunks = 2,
  kAddBos = 4,
  kHasBos = 8,
  kHasEos = 16,
  kIgnoreMerges = 32,
};
enum EntryFlag : uint32_t { kPresent = 1, kSpecial = 2 };
enum VocabFlag : uint32_t { kByteLevel = 1 };
enum AddedFlag : uint32_t {
  kAddedSpecial = 1,
  kNormalized = 2,
  kLstrip = 4,
  kRstrip = 8,
  kSingleWord = 16,
  kInNormalizedMatcher = 32,
};
enum ModelKind : uint32_t { kMerges = 0, kRanks = 1 };

struct Header {
  uint32_t magic, version, file_bytes, arena_bytes;
  uint32_t flags, model;
  int32_t bos, eos;
  uint32_t steps, entries, vocab, merges, added, names;
  uint32_t reserved, crc32;
};
static_assert(sizeof(Header) == kHeaderBytes);

// Strings go into one arena, each distinct string once.
class ArenaWriter {
 public:
  std::pair<uint32_t, uint32_t> add(const std::string& s) {
    const auto [it, fresh] = offsets_.emplace(s, static_cast<uint32_t>(arena_.size()));
    if (fresh) arena_ += s;
    if (arena_.size() > UINT32_MAX) fail("tokenizer: more than 4 GiB of token text to compile");
    return {it->second, static_cast<uint32_t>(s.size())};
  }
  const std::string& bytes() const { return arena_; }

 private:
  std::string arena_;
  std::unordered_map<std::string, uint32_t> offsets_;
};

void put_u32s(std::string& out, std::initializer_list<uint32_t> values) {
  for (uint32_t v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

uint32_t file_crc32(std::string_view file) {
  const uint32_t head = crc32_bytes(file.data(), kCrcOffset);
  return crc32_bytes(file.data() + kHeaderBytes, file.size() - kHeaderBytes, head);
}

// Names a record in an error; formatted only when there is one.
struct Where {
  const char* kind;
  uint32_t index;
  std::string str() const { return fmt::format("{} {}", kind, index); }
};

// Reads the sections of a checked file; every accessor bounds-checks.
class CompiledReader {
 public:
  CompiledReader(std::string_view file, std::string_view name) : file_(file), name_(name) {}

  [[noreturn]] void damaged(const std::string& what) const {
    fail("{}: damaged compiled tokenizer: {} (delete it to load tokenizer.json instead)", name_,
         what);
  }

  // Checks the header, the size and the crc32; false for another version.
  bool open() {
    if (file_.size() < kHeaderBytes)
      damaged(fmt::format("{} bytes is shorter than its header", file_.size()));
    std::memcpy(&h_, file_.data(), kHeaderBytes);
    if (h_.magic != kMagic) damaged("it does not start with the magic \"SLTK\"");
    if (h_.version != kCompiledTokenizerVersion) return false;
    if (h_.file_bytes != file_.size())
      damaged(
          fmt::format("the header says {} bytes, the file has {}", h_.file_bytes, file_.size()));
    if (file_crc32(file_) != h_.crc32) damaged("crc32 mismatch");
    if (h_.reserved != 0) damaged("the reserved header field is not 0");
    if (h_.flags >= 64) damaged(fmt::format("unknown header flags 0x{:x}", h_.flags));
    if (h_.model > kRanks) damaged(fmt::format("unknown model kind {}", h_.model));
    if (h_.steps == 0 || h_.steps > kMaxSteps)
      damaged(fmt::format("{} pre-tokenizer steps", h_.steps));
    if (h_.entries == 0 || h_.entries > kMaxTokenId + 1)
      damaged(fmt::format("{} token ids", h_.entries));
    for (const auto& [count, what] : {std::pair{h_.vocab, "vocabulary tokens"},
                                      {h_.added, "added tokens"},
                                      {h_.names, "added token names"}}) {
      if (count > h_.entries) damaged(fmt::format("{} {} for {} ids", count, what, h_.entries));
    }
    if (h_.merges > kMaxTokenId + 1) damaged(fmt::format("{} merges", h_.merges));
    if (h_.model == kRanks && h_.merges != 0) damaged("a rank model with merges");
    steps_at_ = kHeaderBytes;
    entries_at_ = steps_at_ + uint64_t{h_.steps} * kStepBytes;
    vocab_at_ = entries_at_ + uint64_t{h_.entries} * kEntryBytes;
    merges_at_ = vocab_at_ + uint64_t{h_.vocab} * kVocabBytes;
    added_at_ = merges_at_ + uint64_t{h_.merges} * kMergeBytes;
    names_at_ = added_at_ + uint64_t{h_.added} * kAddedBytes;
    arena_at_ = names_at_ + uint64_t{h_.names} * kNameBytes;
    if (arena_at_ + h_.arena_bytes != file_.size()) {
      damaged(fmt::format("its counts and arena need {} bytes, the file has {}",
                          arena_at_ + h_.arena_bytes, file_.size()));
    }
    return true;
  }

  const Header& header() const { return h_; }
  uint32_t field(uint64_t section, size_t record_bytes, uint32_t index, size_t word) const {
    uint32_t v;
    std::memcpy(&v, file_.data() + section + uint64_t{index} * record_bytes + word * 4, 4);
    return v;
  }
  // A string of the arena; refuses a range outside it.
  std::string_view text(uint32_t offset, uint32_t length, Where what) const {
    if (uint64_t{offset} + length > h_.arena_bytes)
      damaged(fmt::format("{} spans bytes {}..{} of an arena of {}", what.str(), offset,
                          uint64_t{offset} + length, h_.arena_bytes));
    return file_.substr(arena_at_ + offset, length);
  }
  TokenId id(uint32_t raw, Where what) const {
    if (raw >= h_.entries)
      damaged(fmt::format("{} is id {}, outside 0..{}", what.str(), raw, h_.entries - 1));
    return static_cast<TokenId>(raw);
  }

  uint64_t steps_at_ = 0, entries_at_ = 0, vocab_at_ = 0, merges_at_ = 0, added_at_ = 0,
           names_at_ = 0, arena_at_ = 0;

 private:
  std::string_view file_;
  std::string name_;
  Header h_{};
};

void read_steps(const CompiledReader& r, std::vector<PreTokenizerStep>& steps) {
  for (uint32_t i = 0; i < r.header().steps; ++i) {
    uint32_t word = r.field(r.steps_at_, kStepBytes, i, 0);
    const uint8_t kind = word & 0xFF, pattern = (word >> 8) & 0xFF, use_regex = (word >> 16) & 0xFF,
                  prefix = word >> 24;
    if (kind > 1 || pattern > static_cast<uint8_t>(SplitPattern::kKimi) || use_regex > 1 ||
        prefix > 1)
      r.damaged(fmt::format("pre-tokenizer step {} is 0x{:08x}", i, word));
    steps.push_back({static_cast<PreTokenizerStep::Kind>(kind), static_cast<SplitPattern>(pattern),
                     use_regex == 1, prefix == 1});
  }
}

void read_entries(const CompiledReader& r, Tokenizer::Impl& impl) {
  impl.entries.resize(r.header().entries);
  for (uint32_t i = 0; i < r.header().entries; ++i) {
    const uint32_t flags = r.field(r.entries_at_, kEntryBytes, i, 4);
    if (flags > (kPresent | kSpecial)) r.damaged(fmt::format("id {} has flags 0x{:x}", i, flags));
    if (!(flags & kPresent)) continue;
    auto& e = impl.entries[i];
    const Where what{"id", i};
    e.text = r.text(r.field(r.entries_at_, kEntryBytes, i, 0),
                    r.field(r.entries_at_, kEntryBytes, i, 1), what);
    if (!is_valid_utf8(e.text)) r.damaged(fmt::format("{}'s text is not valid UTF-8", what.str()));
    e.bytes = r.text(r.field(r.entries_at_, kEntryBytes, i, 2),
                     r.field(r.entries_at_, kEntryBytes, i, 3), what);
    e.present = true;
    e.special = (flags & kSpecial) != 0;
  }
}

void read_vocab(const CompiledReader& r, Tokenizer::Impl& impl) {
  const Header& h = r.header();
  BpeModel* bpe =
      h.model == kMerges ? &impl.model.emplace<BpeModel>((h.flags & kIgnoreMerges) != 0) : nullptr;
  RankBpe* ranks = h.model == kRanks ? &impl.model.emplace<RankBpe>() : nullptr;
  if (ranks) ranks->reserve(h.vocab, 0);
  if (bpe) impl.model_vocab.reserve(h.vocab);
  for (uint32_t i = 0; i < h.vocab; ++i) {
    const Where what{"vocabulary token", i};
    const TokenId id = r.id(r.field(r.vocab_at_, kVocabBytes, i, 4), what);
    const uint32_t flags = r.field(r.vocab_at_, kVocabBytes, i, 5);
    if (flags > kByteLevel) r.damaged(fmt::format("{} has flags 0x{:x}", what.str(), flags));
    const std::string_view bytes = r.text(r.field(r.vocab_at_, kVocabBytes, i, 2),
                                          r.field(r.vocab_at_, kVocabBytes, i, 3), what);
    if (ranks) {
      if (id != static_cast<TokenId>(i)) r.damaged(fmt::format("{} has rank {}", what.str(), id));
      if (bytes.empty()) r.damaged(fmt::format("{} has no bytes", what.str()));
      if (const auto earlier = ranks->add(bytes))
        r.damaged(fmt::format("{} repeats rank {}", what.str(), *earlier));
      continue;
    }
    const std::string_view text = r.text(r.field(r.vocab_at_, kVocabBytes, i, 0),
                                         r.field(r.vocab_at_, kVocabBytes, i, 1), what);
    if (!impl.model_vocab.emplace(std::string(text), id).second)
      r.damaged(fmt::format("{} repeats a text", what.str()));
    if (flags & kByteLevel) bpe->add_token(std::string(bytes), id);
  }
  if (ranks) {
    for (int byte = 0; byte < 256; ++byte) {
      if (!ranks->has_byte(static_cast<uint8_t>(byte)))
        r.damaged(fmt::format("no rank for byte 0x{:02X}", byte));
    }
    return;
  }
  for (uint32_t i = 0; i < h.merges; ++i) {
    const Where what{"merge", i};
    bpe->add_merge(r.id(r.field(r.merges_at_, kMergeBytes, i, 0), what),
                   r.id(r.field(r.merges_at_, kMergeBytes, i, 1), what),
                   r.id(r.field(r.merges_at_, kMergeBytes, i, 2), what));
  }
}

void read_added(const CompiledReader& r, Tokenizer::Impl& impl) {
  std::vector<AddedToken> raw, normalized;
  for (uint32_t i = 0; i < r.header().added; ++i) {
    const Where what{"added token", i};
    AddedToken t;
    t.id = r.id(r.field(r.added_at_, kAddedBytes, i, 0), what);
    t.content = r.text(r.field(r.added_at_, kAddedBytes, i, 1),
                       r.field(r.added_at_, kAddedBytes, i, 2), what);
    if (t.content.empty() || !is_valid_utf8(t.content))
      r.damaged(fmt::format("{} is empty or not valid UTF-8", what.str()));
    const uint32_t flags = r.field(r.added_at_, kAddedBytes, i, 3);
    if (flags >= 64) r.damaged(fmt::format("{} has flags 0x{:x}", what.str(), flags));
    t.special = flags & kAddedSpecial;
    t.normalized = flags & kNormalized;
    t.lstrip = flags & kLstrip;
    t.rstrip = flags & kRstrip;
    t.single_word = flags & kSingleWord;
    if (!impl.entries[t.id].present)
      r.damaged(fmt::format("{} names id {}, which has no token", what.str(), t.id));
    (flags & kInNormalizedMatcher ? normalized : raw).push_back(std::move(t));
  }
  impl.raw_added = AddedTokenMatcher(std::move(raw));
  impl.normalized_added = AddedTokenMatcher(std::move(normalized));
  for (uint32_t i = 0; i < r.header().names; ++i) {
    const Where what{"added token name", i};
    const std::string_view content = r.text(r.field(r.names_at_, kNameBytes, i, 0),
                                            r.field(r.names_at_, kNameBytes, i, 1), what);
    const TokenId id = r.id(r.field(r.names_at_, kNameBytes, i, 2), what);
    if (!impl.entries[id].present)
      r.damaged(fmt::format("{} names id {}, which has no token", what.str(), id));
    impl.added_vocab[std::string(content)] = id;
  }
}

std::optional<TokenId> header_token(const CompiledReader& r, bool has, int32_t id,
                                    const char* what) {
  if (!has) return std::nullopt;
  if (id < 0 || static_cast<uint32_t>(id) >= r.header().entries)
    r.damaged(fmt::format("the {} is id {}, outside 0..{}", what, id, r.header().entries - 1));
  return id;
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> read_compiled(std::string_view file, std::string_view name) {
  CompiledReader r(file, name);
  if (!r.open()) return nullptr;
  const Header& h = r.header();
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->source = name;
  impl->nfc = h.flags & kNfc;
  impl->kimi_chunks = h.flags & kKimiChunks;
  impl->add_bos = h.flags & kAddBos;
  std::vector<PreTokenizerStep> steps;
  read_steps(r, steps);
  impl->pre_tokenizer = PreTokenizer(std::move(steps));
  read_entries(r, *impl);
  read_vocab(r, *impl);
  read_added(r, *impl);
  impl->bos = header_token(r, h.flags & kHasBos, h.bos, "bos token");
  impl->eos = header_token(r, h.flags & kHasEos, h.eos, "eos token");
  if (impl->add_bos && !impl->bos) r.damaged("add_bos without a bos token");
  for (const auto& token : {impl->bos, impl->eos}) {
    if (token && !impl->entries[*token].present)
      r.damaged(fmt::format("bos or eos is id {}, which has no token", *token));
  }
  return impl;
}

uint32_t compiled_version(std::string_view file) {
  Header h{};
  if (file.size() < kHeaderBytes) return 0;
  std::memcpy(&h, file.data(), kHeaderBytes);
  // A text file (a tiktoken line may start with SLTK) never has bytes this
  // small where the version sits.
  return h.magic == kMagic && h.version < 0x10000 ? h.version : 0;
}

std::string Tokenizer::compile() const {
  const Impl& impl = *impl_;
  ArenaWriter arena;
  std::string steps, entries, vocab, merges, added, names;
  for (const PreTokenizerStep& s : impl.pre_tokenizer.steps()) {
    put_u32s(steps, {static_cast<uint32_t>(s.kind) | static_cast<uint32_t>(s.pattern) << 8 |
                     uint32_t{s.use_regex} << 16 | uint32_t{s.add_prefix_space} << 24});
  }
  for (const Impl::Entry& e : impl.entries) {
    const auto [text_at, text_len] = arena.add(e.text);
    const auto [bytes_at, bytes_len] = arena.add(e.bytes);
    put_u32s(entries, {text_at, text_len, bytes_at, bytes_len,
                       (e.present ? kPresent : 0u) | (e.special ? kSpecial : 0u)});
  }
  uint32_t model = kMerges, flags = 0, vocab_count = 0;
  if (const auto* ranks = std::get_if<RankBpe>(&impl.model)) {
    model = kRanks;
    for (size_t r = 0; r < ranks->size(); ++r) {
      const auto [at, len] = arena.add(std::string(ranks->bytes(static_cast<TokenId>(r))));
      put_u32s(vocab, {0, 0, at, len, static_cast<uint32_t>(r), kByteLevel});
    }
    vocab_count = static_cast<uint32_t>(ranks->size());
  } else {
    const BpeModel& bpe = std::get<BpeModel>(impl.model);
    if (bpe.ignore_merges()) flags |= kIgnoreMerges;
    std::vector<std::pair<TokenId, const std::string*>> by_id;
    for (const auto& [text, id] : impl.model_vocab) by_id.emplace_back(id, &text);
    std::sort(by_id.begin(), by_id.end());  // the same tokenizer gives the same bytes
    for (const auto& [id, text] : by_id) {
      const auto bytes = byte_level_to_bytes(*text);
      const auto [text_at, text_len] = arena.add(*text);
      const auto [bytes_at, bytes_len] = arena.add(bytes ? *bytes : *text);
      put_u32s(vocab, {text_at, text_len, bytes_at, bytes_len, static_cast<uint32_t>(id),
                       bytes ? kByteLevel : 0u});
    }
    vocab_count = static_cast<uint32_t>(by_id.size());
    for (const auto& [left, right, merged] : bpe.merges()) {
      put_u32s(merges, {static_cast<uint32_t>(left), static_cast<uint32_t>(right),
                        static_cast<uint32_t>(merged)});
    }
  }
  uint32_t added_count = 0;
  for (const auto* matcher : {&impl.raw_added, &impl.normalized_added}) {
    for (const AddedToken& t : matcher->tokens()) {
      const auto [at, len] = arena.add(t.content);
      put_u32s(added, {static_cast<uint32_t>(t.id), at, len,
                       (t.special ? kAddedSpecial : 0u) | (t.normalized ? kNormalized : 0u) |
                           (t.lstrip ? kLstrip : 0u) | (t.rstrip ? kRstrip : 0u) |
                           (t.single_word ? kSingleWord : 0u) |
                           (matcher == &impl.normalized_added ? kInNormalizedMatcher : 0u)});
      ++added_count;
    }
  }
  std::vector<std::pair<std::string, TokenId>> sorted_names(impl.added_vocab.begin(),
                                                            impl.added_vocab.end());
  std::sort(sorted_names.begin(), sorted_names.end());
  for (const auto& [content, id] : sorted_names) {
    const auto [at, len] = arena.add(content);
    put_u32s(names, {at, len, static_cast<uint32_t>(id)});
  }
  flags |= (impl.nfc ? kNfc : 0u) | (impl.kimi_chunks ? kKimiChunks : 0u) |
           (impl.add_bos ? kAddBos : 0u) | (impl.bos ? kHasBos : 0u) | (impl.eos ? kHasEos : 0u);
  const uint64_t file_bytes = kHeaderBytes + steps.size() + entries.size() + vocab.size() +
                              merges.size() + added.size() + names.size() + arena.bytes().size();
  if (file_bytes > kMaxFileBytes)
    fail("tokenizer: its compiled form would be {} bytes, too large", file_bytes);
  Header h{kMagic,
           kCompiledTokenizerVersion,
           static_cast<uint32_t>(file_bytes),
           static_cast<uint32_t>(arena.bytes().size()),
           flags,
           model,
           impl.bos.value_or(0),
           impl.eos.value_or(0),
           static_cast<uint32_t>(impl.pre_tokenizer.steps().size()),
           static_cast<uint32_t>(impl.entries.size()),
           vocab_count,
           static_cast<uint32_t>(merges.size() / kMergeBytes),
           added_count,
           static_cast<uint32_t>(sorted_names.size()),
           0,
           0};
  std::string out(reinterpret_cast<const char*>(&h), kHeaderBytes);
  out.reserve(file_bytes);
  for (const std::string* part : {&steps, &entries, &vocab, &merges, &added, &names}) out += *part;
  out += arena.bytes();
  h.crc32 = file_crc32(out);
  std::memcpy(out.data() + kCrcOffset, &h.crc32, sizeof h.crc32);
  return out;
}

Tokenizer Tokenizer::from_compiled(std::string_view file, std::string_view name) {
  auto impl = read_compiled(file, name);
  if (!impl) {
    fail("{}: compiled tokenizer version {}; this build reads version {}", name,
         compiled_version(file), kCompiledTokenizerVersion);
  }
  return Tokenizer(std::move(impl));
}

}  // namespace sluice::tokenizer
