// compute/cli/run_options.h: flags and helpers shared by the commands that
// load a model (run, eval): engine options, sampling, token-id lists and the
// expert statistics as text and JSON.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compute/model/engine.h"

namespace sluice::cli {

struct EngineFlags {
  uint32_t context = 0;
  size_t threads = 0;
  uint32_t chunk = 64;
  bool verify = false;
  EngineOptions options() const;
};

void add_engine_flags(CLI::App& cmd, EngineFlags& flags);
void add_sampling_flags(CLI::App& cmd, SamplingParams& params);

// "1,2,3" or "1 2 3"; throws Error naming `flag` on anything else.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag);
std::string read_stdin();
std::string read_file(const std::string& path, const std::string& flag);

std::string experts_summary(const ExpertSourceStats& stats);
nlohmann::json experts_json(const ExpertSourceStats& stats);

}  // namespace sluice::cli
