// compute/chat/pystr.h: Python str semantics over UTF-8 Text — code point
// length and indexing, slicing, strip/split/replace, case mapping, the
// character predicates. Every result keeps the provenance of the bytes it
// was made from; nothing here evaluates templates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compute/chat/value.h"

namespace sluice::chat {

// Byte length of the UTF-8 sequence starting at `i` (1 for a stray byte).
size_t utf8_length_at(std::string_view s, size_t i);
char32_t decode_at(std::string_view s, size_t i);
size_t code_point_count(std::string_view s);
// Byte offsets of each code point, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);

bool is_printable(char32_t c);  // str.isprintable

// Python slicing s[start:stop:step] over a sequence of `n` items; returns the
// chosen indices. Throws EvalError for step 0.
std::vector<size_t> slice_indices(size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step);

// str.strip/lstrip/rstrip; `chars` nullopt strips whitespace.
enum class StripSide { kBoth, kLeft, kRight };
Text strip(const Text& s, const std::optional<std::string>& chars, StripSide side);
// str.split(sep, maxsplit) (sep nullopt: runs of whitespace) and rsplit.
std::vector<Text> split(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<Text> rsplit(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.replace(old, new, count); the inserted text keeps `replacement`'s provenance.
Text replace(const Text& s, const std::string& old, const Text& replacement, int64_t count);
// str.upper/lower/capitalize/title and jinja's title filter; each output
// character is tainted when the character it came from was.
enum class Case { kUpper, kLower };
Text change_case(const Text& s, Case to);
Text capitalize(const Text& s);
Text python_title(const Text& s);
Text jinja_title(const Text& s);
// Python str.find in code points, -1 when absent.
int64_t find(const std::string& s, const std::string& needle);

}  // namespace sluice::chat
