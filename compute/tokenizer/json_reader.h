// compute/tokenizer/json_reader.h: typed, range-checked access to untrusted
// tokenizer JSON, every error naming the file and the field. Shared by the
// loaders in this folder; it never interprets what the fields mean.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/unicode.h"
#include "proto/error.h"

namespace sluice::tokenizer {

// Ids index a dense table; a hostile file must not make it huge.
inline constexpr int64_t kMaxTokenId = (1 << 24) - 1;
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  nlohmann::json parse(std::string_view text) const {
    try {
      return nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {  // also out-of-range numbers such as 1e309
      fail("{}: not valid JSON: {}", file_, e.what());
    }
  }

  const nlohmann::json& member(const nlohmann::json& object, const char* key,
                               std::string_view where) const {
    if (!object.is_object()) fail("{}: {} is not an object", file_, where);
    const auto it = object.find(key);
    if (it == object.end()) fail("{}: {} has no \"{}\"", file_, where, key);
    return *it;
  }

  std::string string_of(const nlohmann::json& value, std::string_view what) const {
    if (!value.is_string()) fail("{}: {} is not a string", file_, what);
    const auto& s = value.get_ref<const std::string&>();
    if (!is_valid_utf8(s)) fail("{}: {} is not valid UTF-8", file_, what);
    return s;
  }

  bool bool_or(const nlohmann::json& object, const char* key, bool fallback,
               std::string_view where) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail("{}: {}.{} is not a boolean", file_, where, key);
    return it->get<bool>();
  }

  TokenId id_of(const nlohmann::json& value, std::string_view what) const {
    if (!value.is_number_integer()) fail("{}: {} is not an integer id", file_, what);
    const auto id = value.get<int64_t>();
    if (id < 0 || id > kMaxTokenId)
      fail("{}: {} is {}, outside 0..{}", file_, what, id, kMaxTokenId);
    return static_cast<TokenId>(id);
  }

  std::string type_of(const nlohmann::json& object, std::string_view where) const {
    return string_of(member(object, "type", where), std::string(where) + ".type");
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// tokenizer_config.json's text parsed, refusing anything but an object.
nlohmann::json parse_config(std::string_view config_json, std::string_view config_name);

}  // namespace sluice::tokenizer
