// tests/fuzz/fuzz_targets.h: the fuzz targets, one per untrusted input the
// engine parses: the manifest, expert record headers, safetensors headers,
// tokenizer.json, the sluice-io Cap'n Proto messages, and (fuzz_text_targets.cpp)
// chat templates, JSON schemas, tiktoken files, XTML conversations and HTTP
// request bodies. A target may refuse
// its input only with sluice::Error (or, for Cap'n Proto, kj::Exception); any
// other exception, a crash or a sanitizer report is a finding. Test-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::fuzz {

struct Target {
  const char* name;
  // Parses `data`; returns true when accepted, false when refused cleanly.
  bool (*run)(const uint8_t* data, size_t size);
  // Valid inputs the mutation loop starts from (and a libFuzzer corpus).
  std::vector<std::string> (*seeds)();
  bool json = false;  // mutations that keep JSON plausible help
};

const std::vector<Target>& targets();
// The targets of fuzz_text_targets.cpp (templates, schemas, tiktoken, XTML,
// request bodies), part of targets().
std::vector<Target> text_targets();
const Target* find_target(const std::string& name);

}  // namespace sluice::fuzz
