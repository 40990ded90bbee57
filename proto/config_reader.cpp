// proto/config_reader.cpp: the one place config.json values are typed and
// bounded; the family specs say which keys and defaults, this says how.
#include "proto/config_reader.h"

#include <cmath>

#include "proto/error.h"

namespace sluice {

ConfigReader::ConfigReader(const nlohmann::json& config, std::string where) : config_(config), where_(std::move(where)) {
  if (!config_.is_object()) fail("{}: not a JSON object", where_);
}

const nlohmann::json* ConfigReader::find(std::string_view key, std::initializer_list<std::string_view> aliases) const {
  auto lookup = [&](std::string_view name) -> const nlohmann::json* {
    const auto it = config_.find(std::string(name));
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  };
  if (const auto* value = lookup(key)) return value;
  for (std::string_view alias : aliases) {
    if (const auto* value = lookup(alias)) return value;
  }
  return nullptr;
}

uint32_t ConfigReader::count(std::string_view key, uint64_t lo, uint64_t hi,
                             std::initializer_list<std::string_view> aliases) const {
  const nlohmann::json* value = find(key, aliases);
  if (value == nullptr) fail("{}: key {} is missing", where_, key);
  return count_or(key, 0, lo, hi, aliases);
}

uint32_t ConfigReader::count_or(std::string_view key, uint64_t fallback, uint64_t lo, uint64_t hi,
                                std::initializer_list<std::string_view> aliases) const {
  const nlohmann::json* value = find(key, aliases);
  uint64_t v = fallback;
  if (value != nullptr) {
    if (!value->is_number_integer()) fail("{}: key {} must be an integer, not {}", where_, key, value->dump());
    if (value->get<int64_t>() < 0) fail("{}: key {} is {}, outside [{}, {}]", where_, key, value->get<int64_t>(), lo, hi);
    v = value->get<uint64_t>();
  }
  if (v < lo || v > hi) fail("{}: key {} is {}, outside [{}, {}]", where_, key, v, lo, hi);
  return static_cast<uint32_t>(v);
}

float ConfigReader::number_or(std::string_view key, double fallback, double lo, double hi, bool exclusive_lo) const {
  const nlohmann::json* value = find(key);
  double v = fallback;
  if (value != nullptr) {
    if (!value->is_number()) fail("{}: key {} must be a number, not {}", where_, key, value->dump());
    v = value->get<double>();
  }
  const bool low_ok = exclusive_lo ? v > lo : v >= lo;
  if (!std::isfinite(v) || !low_ok || v > hi) {
    fail("{}: key {} is {}, outside {}{}, {}]", where_, key, v, exclusive_lo ? "(" : "[", lo, hi);
  }
  return static_cast<float>(v);
}

bool ConfigReader::flag_or(std::string_view key, bool fallback) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) fail("{}: key {} must be true or false, not {}", where_, key, value->dump());
  return value->get<bool>();
}

std::optional<std::string> ConfigReader::string(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) fail("{}: key {} must be a string, not {}", where_, key, value->dump());
  return value->get<std::string>();
}

std::vector<uint32_t> ConfigReader::layer_list(std::string_view key, uint32_t layers) const {
  std::vector<uint32_t> out;
  const nlohmann::json* value = find(key);
  if (value == nullptr) return out;
  if (!value->is_array()) fail("{}: key {} must be a list of layer indexes", where_, key);
  for (const auto& v : *value) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers) {
      fail("{}: key {} holds {}, not a layer index below {}", where_, key, v.dump(), layers);
    }
    out.push_back(v.get<uint32_t>());
  }
  return out;
}

std::vector<int32_t> ConfigReader::token_ids(std::string_view key) const {
  std::vector<int32_t> ids;
  const nlohmann::json* value = find(key);
  if (value == nullptr) return ids;
  auto take = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      fail("{}: key {} must hold token ids, not {}", where_, key, v.dump());
    }
    ids.push_back(v.get<int32_t>());
  };
  if (value->is_array()) {
    for (const auto& v : *value) take(v);
  } else {
    take(*value);
  }
  return ids;
}

void ConfigReader::refuse(std::string_view key, const nlohmann::json& value, std::string_view why) const {
  fail("{}: key {} = {} is not supported: {}", where_, key, value.dump(), why);
}

}  // namespace sluice
