// compute/tokenizer/tokenizer_files.cpp: finds and reads tokenizer files —
// which loader a file or a container needs, and tokenizer_config.json's token
// settings. It never parses a vocabulary itself.
#include <nlohmann/json.hpp>

#include "compute/tokenizer/json_reader.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/tokenizer_impl.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

using nlohmann::json;

std::optional<TokenId> config_token(const Reader& r, const json& config, const char* key,
                                    const Tokenizer::Impl& impl) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string content;
  if (it->is_string()) {
    content = r.string_of(*it, key);
  } else if (it->is_object()) {
    content = r.string_of(r.member(*it, "content", key), std::string(key) + ".content");
  } else {
    fail("{}: {} is neither a string nor an object with \"content\"", r.file(), key);
  }
  const auto id = impl.find_token(content);
  if (!id) fail("{}: {} {} is not a token of the tokenizer", r.file(), key, json(content).dump());
  return id;
}

std::string read_file(FileSystem& fs, const std::string& path) {
  auto file = fs.open(path, OpenMode::kBuffered);
  const uint64_t size = file->size();
  if (size > kMaxFileBytes) fail("{}: {} bytes is too large for a tokenizer file", path, size);
  std::string text(size, '\0');
  read_exact(*file, 0, text.data(), size);
  return text;
}

// A tokenizer.json by name, or by content when the name does not say.
bool is_json_tokenizer(const std::string& path, std::string_view text) {
  if (path.ends_with(".json")) return true;
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

}  // namespace

json parse_config(std::string_view config_json, std::string_view config_name) {
  const Reader c(config_name);
  json config = c.parse(config_json);
  if (!config.is_object()) fail("{}: the top level is not an object", config_name);
  return config;
}

void read_token_config(const json& config, std::string_view config_name, Tokenizer::Impl& impl) {
  const Reader c(config_name);
  impl.bos = config_token(c, config, "bos_token", impl);
  impl.eos = config_token(c, config, "eos_token", impl);
  impl.add_bos = c.bool_or(config, "add_bos_token", false, "the top level");
  if (impl.add_bos && !impl.bos)
    fail("{}: add_bos_token is true but bos_token is not set", config_name);
}

Tokenizer Tokenizer::load(const std::string& tokenizer_path, const std::string& config_path,
                          FileSystem& fs) {
  const std::string text = read_file(fs, tokenizer_path);
  const std::string config = config_path.empty() ? std::string() : read_file(fs, config_path);
  if (compiled_version(text) != 0) return from_compiled(text, tokenizer_path);
  if (is_json_tokenizer(tokenizer_path, text))
    return from_json(text, tokenizer_path, config, config_path);
  return from_tiktoken(text, tokenizer_path, config, config_path, TiktokenPattern::kKimi);
}

Tokenizer Tokenizer::load_tiktoken(const std::string& ranks_path, const std::string& config_path,
                                   TiktokenPattern pattern, FileSystem& fs) {
  const std::string ranks = read_file(fs, ranks_path);
  const std::string config = config_path.empty() ? std::string() : read_file(fs, config_path);
  return from_tiktoken(ranks, ranks_path, config, config_path, pattern);
}

Tokenizer Tokenizer::load_from_container(const std::string& model_dir, FileSystem& fs) {
  if (!fs.exists(model_dir)) fail("{}: no such model directory", model_dir);
  if (!fs.exists(model_dir + "/manifest.json")) {
    fail("{}: incomplete container: conversion did not finish (no manifest.json)", model_dir);
  }
  // The compiled form holds tokenizer_config.json's settings too; one of
  // another version (a newer build's) leaves the files it was made from.
  const std::string compiled_path = model_dir + "/tokenizer.bin";
  if (fs.exists(compiled_path)) {
    const std::string compiled = read_file(fs, compiled_path);
    if (auto impl = read_compiled(compiled, compiled_path)) return Tokenizer(std::move(impl));
  }
  const std::string config = model_dir + "/tokenizer_config.json";
  const std::string config_path = fs.exists(config) ? config : "";
  const std::string json_path = model_dir + "/tokenizer.json";
  const std::string ranks_path = model_dir + "/tiktoken.model";
  // Only Kimi checkpoints ship tiktoken.model, and they carry no tokenizer.json.
  if (!fs.exists(json_path) && fs.exists(ranks_path)) {
    return load_tiktoken(ranks_path, config_path, TiktokenPattern::kKimi, fs);
  }
  return load(json_path, config_path, fs);
}

}  // namespace sluice::tokenizer
