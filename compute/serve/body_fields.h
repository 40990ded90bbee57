// compute/serve/body_fields.h: internal to compute/serve: the field checks
// both APIs' request parsers share (request.cpp, anthropic.cpp). A field that
// fails is an ApiError naming it, never a default.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

#include "compute/serve/api_error.h"

namespace sluice::serve {

// Present and not null.
inline bool present(const nlohmann::json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

// body[key] as a finite number within [low, high].
inline double number_in(const nlohmann::json& body, const char* key, double low, double high) {
  const nlohmann::json& value = body[key];
  if (!value.is_number()) bad_param(key, "expected a number, got {}", value.type_name());
  const double x = value.get<double>();
  if (!std::isfinite(x) || x < low || x > high)
    bad_param(key, "{} is out of range [{}, {}]", value.dump(), low, high);
  return x;
}

}  // namespace sluice::serve
