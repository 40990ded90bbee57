// proto/config_reader.h: typed reads of a checkpoint's config.json as
// Hugging Face's config classes read them: a key that is absent or null takes
// the family's class default, a key may have aliases, and every value is
// range-checked. Errors name the key; nothing here knows a family.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

class ConfigReader {
 public:
  // `where` prefixes every error ("config.json", a file path).
  ConfigReader(const nlohmann::json& config, std::string where);

  // The value under `key`, or under the first alias present; nullptr when
  // none is present or every present one is null.
  const nlohmann::json* find(std::string_view key, std::initializer_list<std::string_view> aliases = {}) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // A required integer in [lo, hi].
  uint32_t count(std::string_view key, uint64_t lo, uint64_t hi,
                 std::initializer_list<std::string_view> aliases = {}) const;
  // An integer in [lo, hi], `fallback` (the class default) when absent or null.
  uint32_t count_or(std::string_view key, uint64_t fallback, uint64_t lo, uint64_t hi,
                    std::initializer_list<std::string_view> aliases = {}) const;
  // A finite number in (lo, hi] (`positive` excludes lo, else [lo, hi]).
  float number_or(std::string_view key, double fallback, double lo, double hi, bool exclusive_lo = true) const;
  bool flag_or(std::string_view key, bool fallback) const;
  std::optional<std::string> string(std::string_view key) const;
  // A list of layer indexes, each below `layers`.
  std::vector<uint32_t> layer_list(std::string_view key, uint32_t layers) const;
  // One token id or a list of them (eos_token_id); empty when absent.
  std::vector<int32_t> token_ids(std::string_view key) const;

  // Refuses, naming the key, a key whose present value would change the math
  // in a way the family does not implement: `supported(value)` says whether
  // the value is one sluice computes correctly.
  template <typename Predicate>
  void refuse_unless(std::string_view key, Predicate supported, std::string_view why) const {
    const nlohmann::json* value = find(key);
    if (value != nullptr && !supported(*value)) refuse(key, *value, why);
  }

  const nlohmann::json& json() const { return config_; }
  const std::string& where() const { return where_; }

 private:
  [[noreturn]] void refuse(std::string_view key, const nlohmann::json& value, std::string_view why) const;
  const nlohmann::json& config_;
  std::string where_;
};

}  // namespace sluice
