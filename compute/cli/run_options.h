// compute/cli/run_options.h: flags and helpers shared by the commands that
// load a model (run, eval): engine options, sampling, token-id lists and the
// expert statistics as text and JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/host/engine_setup.h"
#include "compute/model/engine.h"
#include "compute/host/hosted_model.h"
#include "ioworker/memory_plan.h"

namespace sluice::cli {

// EngineFlags, has_vision_tower() and plan_shape() are compute/host's.
using sluice::EngineFlags;

void add_engine_flags(CLI::App& cmd, EngineFlags& flags);
// --seed lands in `seed`: -1 (the default) asks for a random one, which
// resolve_seed() draws and the command prints so the run can be repeated.
void add_sampling_flags(CLI::App& cmd, SamplingParams& params, int64_t& seed);
uint64_t resolve_seed(int64_t seed);
// --enable-thinking / --disable-thinking, which exclude each other: the
// template's enable_thinking, left unset when neither is given.
void add_thinking_flags(CLI::App& cmd, std::optional<bool>& enable_thinking);

// "1,2,3" or "1 2 3"; anything else is a usage error naming `flag`.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag);
// All of stdin, less one trailing newline (the one `echo` or a heredoc adds).
std::string read_stdin();
std::string read_file(const std::string& path, const std::string& flag);

// An output file written under a temporary name beside `path` and renamed
// onto it by commit(): a run that fails leaves nothing that looks complete.
class PendingOutput {
 public:
  explicit PendingOutput(std::string path);  // an empty path: no file
  ~PendingOutput();                          // removes the temporary unless committed
  PendingOutput(const PendingOutput&) = delete;
  PendingOutput& operator=(const PendingOutput&) = delete;
  // Where to write ("" when there is no file).
  const std::string& temp_path() const { return temp_path_; }
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  bool committed_ = false;
};

// experts_json() is compute/host/hosted_model.h's.
std::string experts_summary(const ExpertSourceStats& stats);

}  // namespace sluice::cli
