// router/trace.cpp: the routing trace's JSON lines (nlohmann-json).
#include "router/trace.h"

#include <nlohmann/json.hpp>

#include "proto/error.h"

namespace sluice::router {

TraceWriter::TraceWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) fail("{}: cannot open for writing (--trace-out)", path);
}

void TraceWriter::write(const TraceToken& token) {
  nlohmann::ordered_json line = {{"tok", token.tok}, {"layers", token.layers}};
  if (!token.weights.empty()) line["weights"] = token.weights;
  out_ << line.dump() << '\n';
  if (!out_) fail("{}: cannot write the routing trace", path_);
}

void TraceWriter::close() {
  out_.flush();
  if (!out_) fail("{}: cannot write the routing trace", path_);
  out_.close();
}

std::vector<TraceToken> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read the routing trace", path);
  std::vector<TraceToken> trace;
  std::string text;
  size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    const auto bad = [&](const char* why) { fail("{}:{}: {} (expected {{\"tok\": N, \"layers\": [[ids], ...]}})", path, line, why); };
    if (j.is_discarded() || !j.is_object()) bad("not a JSON object");
    if (!j.contains("tok") || !j["tok"].is_number_unsigned()) bad("\"tok\" is missing or not a non-negative integer");
    if (!j.contains("layers") || !j["layers"].is_array()) bad("\"layers\" is missing or not a list");
    TraceToken token;
    token.tok = j["tok"].get<uint64_t>();
    for (const nlohmann::json& layer : j["layers"]) {
      if (!layer.is_array()) bad("a layer is not a list of expert ids");
      std::vector<uint32_t>& ids = token.layers.emplace_back();
      for (const nlohmann::json& id : layer) {
        if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) bad("an expert id is not a non-negative integer");
        ids.push_back(id.get<uint32_t>());
      }
    }
    if (!trace.empty() && token.layers.size() != trace.front().layers.size()) {
      fail("{}:{}: {} layers, the first token had {}", path, line, token.layers.size(), trace.front().layers.size());
    }
    trace.push_back(std::move(token));
  }
  if (in.bad()) fail("{}: read error", path);
  return trace;
}

}  // namespace sluice::router
