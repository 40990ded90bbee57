// compute/cli/run_options.h: flags and helpers shared by the commands that
// load a model (run, eval): engine options, sampling, token-id lists and the
// expert statistics as text and JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/model/engine.h"
#include "compute/tokenizer/tokenizer.h"
#include "ioworker/memory_plan.h"

namespace sluice::cli {

// Where routed experts come from: by default an in-process cache (the same
// worker sluice-io runs, over an anonymous segment, sized by the plan rule);
// --attach joins a running sluice-io; --no-cache reads each record directly.
struct EngineFlags {
  uint32_t context = 0;
  size_t threads = 0;
  uint32_t chunk = 64;
  bool verify = false;
  std::string attach;
  std::string budget;
  bool force = false;  // a --budget above the usable memory
  uint32_t readers = 4;
  bool no_cache = false;
  double read_timeout = 60;  // seconds: shm::Client::kDefaultReadTimeout
  bool images = false;       // the prompt has images: the plan counts the vision tower (not a flag)
  // What the command holds besides one sequence, for the plan (not flags):
  // sequences decoded together (serve --parallel) and copies of a
  // sequence's state kept at once (a session loaded or saved, serve's saved prompts).
  uint32_t sequences = 1;
  uint32_t saved_states = 0;
  // The options for these flags. An attached session lives as long as the
  // returned options (it detaches when they are destroyed).
  EngineOptions options() const;
};

void add_engine_flags(CLI::App& cmd, EngineFlags& flags);
// Whether the container's model has a vision tower: a command that may load
// it at any turn (serve, chat's /image) plans for it from the start.
bool has_vision_tower(const std::string& model_dir);
// The plan's picture of this process: its threads (`threads` as --threads
// gives it, 0: SLUICE_THREADS or every core) and its RVQ table layout; the
// EngineFlags overload adds the chunk, sequences, saved states, --force and images.
PlanRequest plan_shape(size_t threads);
PlanRequest plan_shape(const EngineFlags& flags);
// --seed lands in `seed`: -1 (the default) asks for a random one, which
// resolve_seed() draws and the command prints so the run can be repeated.
void add_sampling_flags(CLI::App& cmd, SamplingParams& params, int64_t& seed);
uint64_t resolve_seed(int64_t seed);
// --enable-thinking / --disable-thinking, which exclude each other: the
// template's enable_thinking, left unset when neither is given.
void add_thinking_flags(CLI::App& cmd, std::optional<bool>& enable_thinking);

// A container's tokenizer and the seconds loading it took, which run and eval
// report in --json as {"tokenizer": {"file": ..., "load_seconds": ...}}.
struct TimedTokenizer {
  tokenizer::Tokenizer tokenizer;
  double load_seconds;
  nlohmann::json report() const { return {{"file", tokenizer.loaded_from()}, {"load_seconds", load_seconds}}; }
};
TimedTokenizer load_container_tokenizer(const std::string& model);

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

std::string experts_summary(const ExpertSourceStats& stats);
nlohmann::json experts_json(const ExpertSourceStats& stats);

}  // namespace sluice::cli
