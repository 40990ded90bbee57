// compute/cli/cmd_run.cpp: `sluice run`, text generation from a prompt. Text
// streams to stdout as it is generated; the summary goes to stderr so stdout
// stays pipeable. --dump-logits is the interface scripts/reference.py shares;
// --session resumes a saved sequence and saves it back. Ctrl-C ends the run
// early with its summary (and still saves the session); a second one kills it.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "compute/cli/commands.h"
#include "compute/cli/image_prompt.h"
#include "compute/cli/interrupt.h"
#include "compute/cli/run_options.h"
#include "compute/host/hosted_model.h"
#include "compute/kernels/dispatch.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "compute/model/session_file.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "router/lookahead.h"

namespace sluice::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  uint32_t max_tokens = 128;
  SamplingParams sampling;
  int64_t seed = -1;
  EngineFlags engine;
  std::string dump_logits;
  bool ignore_eos = false;
  bool json = false;
  std::string trace_out;
  std::optional<uint32_t> lookahead;
  std::string session;
  std::vector<std::string> images;
};

void write_row(std::ofstream& out, std::span<const float> row, const std::string& path) {
  out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()));
  if (!out) fail("{}: cannot write logits", path);
}

// "prefill: 192/1000 tokens" on stderr, redrawn at most 5 times a second,
// only on a terminal and only for prompts of more than a few chunks.
std::function<bool(size_t, size_t)> prefill_feedback(uint32_t chunk) {
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  auto last =
      std::make_shared<std::chrono::steady_clock::time_point>();  // the first chunk reports at once
  return [terminal, chunk, last](size_t done, size_t total) {
    if (terminal && total > size_t{4} * chunk) {
      const auto now = std::chrono::steady_clock::now();
      if (done == total) {
        fmt::print(stderr, "\r\033[K");
      } else if (now - *last > std::chrono::milliseconds(200)) {
        *last = now;
        fmt::print(stderr, "\r\033[Kprefill: {}/{} tokens", done, total);
      }
      std::fflush(stderr);
    }
    return !InterruptScope::requested();
  };
}

void run(const RunArgs& args) {
  EngineFlags flags = args.engine;
  flags.images = !args.images.empty();
  flags.saved_states = args.session.empty() ? 0 : 1;
  RoutingOptions routing_options;
  routing_options.lookahead = args.lookahead ? *args.lookahead : router::lookahead_from_environment();
  // Both outputs appear under their names only when the run ends well.
  PendingOutput trace_file(args.trace_out), dump_file(args.dump_logits);
  routing_options.trace_out = trace_file.temp_path();
  HostedModel model(args.model, flags, routing_options, prefill_feedback(args.engine.chunk));
  Engine& engine = model.engine();
  const tokenizer::Tokenizer& tok = model.tokenizer();
  RoutingSession& routing = model.routing();
  const bool resumed = !args.session.empty() && std::filesystem::exists(args.session);
  if (resumed) load_session(args.session, engine.container().identity(), engine.sequence());
  const uint32_t reused = engine.sequence().position();
  std::vector<int32_t> prompt;
  if (!args.prompt_ids.empty()) {
    if (!args.prompt.empty()) usage_error("give either PROMPT or --prompt-ids, not both");
    prompt = parse_token_ids(args.prompt_ids, "--prompt-ids");
  } else {
    if (args.prompt.empty()) usage_error("no prompt: give PROMPT (or - for stdin) or --prompt-ids");
    prompt = prompt_ids(tok, args.prompt == "-" ? read_stdin() : args.prompt, reused == 0);
  }
  const ImagePrompt placed = place_images(engine, tok, std::move(prompt), args.images);
  prompt = placed.tokens;
  const uint32_t context = engine.transformer().context();
  if (prompt.size() > context - reused) {
    if (reused > 0) {
      usage_error(
          "the prompt is {} tokens, longer than the {} left of the context of {} after the {} "
          "tokens of {}",
          prompt.size(), context - reused, context, reused, args.session);
    }
    usage_error(
        "the prompt is {} tokens, longer than the context of {} (--ctx; the model's maximum is {})",
        prompt.size(), context, engine.config().max_positions);
  }
  // The state (and a saved session) records where each image sits, after what it resumed.
  std::vector<MediaRun> media = placed.media;
  for (MediaRun& run : media) run.first += reused;
  engine.sequence().note_media(media);
  SamplingParams sampling = args.sampling;
  sampling.seed = resolve_seed(args.seed);

  std::ofstream dump;
  if (!args.dump_logits.empty()) {
    dump.open(dump_file.temp_path(), std::ios::binary | std::ios::trunc);
    if (!dump) fail("{}: cannot open for writing (--dump-logits)", args.dump_logits);
  }
  std::vector<int32_t> generated;
  std::string text;
  const bool stream = !args.json;
  const InterruptScope interrupt_scope(InterruptScope::Repeat::kOnce);
  Sampler sampler = engine.make_sampler(sampling);
  std::vector<float> logits(engine.config().vocab);
  const GenerationStats stats = generate_text(
      engine, tok, engine.sequence(), prompt, logits, args.max_tokens, sampler, {},
      args.ignore_eos || dump.is_open(),
      [&](int32_t token, std::string_view piece, std::span<const float> row) {
        if (token != kTextTail) {
          if (dump.is_open()) write_row(dump, row, args.dump_logits);
          generated.push_back(token);
        }
        text += piece;
        if (stream) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
        return !InterruptScope::requested();
      },
      placed.rows);
  // The reference's last row is the logits after the last generated token,
  // and a saved session must hold that token too.
  bool last_token_run = generated.empty();
  if (!generated.empty() && (dump.is_open() || !args.session.empty())) {
    if (engine.sequence().position() < context) {
      engine.advance(engine.sequence(), generated.back(), logits);
      if (dump.is_open()) write_row(dump, logits, args.dump_logits);
      last_token_run = true;
    } else if (dump.is_open()) {
      fail(
          "{}: the context of {} is full, so the row after the last generated token cannot be "
          "written",
          args.dump_logits, context);
    }
  }
  routing.finish();
  if (dump.is_open()) {
    dump.close();
    if (!dump) fail("{}: cannot write logits", args.dump_logits);
  }
  dump_file.commit();
  trace_file.commit();
  if (!args.session.empty())
    save_session(args.session, engine.container().identity(), engine.sequence());
  const uint32_t saved = engine.sequence().position();

  // The embedded router's guesses against the real routing, over every MoE layer.
  const shm::GuessStats guesses = routing.guesses();
  const nlohmann::json numbers = generation_json(stats, context);
  const std::string finish = finish_reason_name(stats.finish);
  const std::string finish_note = stats.context_full
                                      ? fmt::format(" (the context of {} is full)", context)
                                  : stats.finish == FinishReason::kCancelled ? " (interrupted)"
                                                                             : "";
  if (args.json) {
    nlohmann::json out = numbers;
    out["text"] = text;
    out["tokens"] = generated;
    out["seed"] = sampling.seed;
    out["tokenizer"] = model.tokenizer_report();
    // What scripts/reference.py --decode-crossover and --f32-activations need to model this run.
    const kernels::Exec exec{kernels::isa_from_environment(), nullptr, kernels::trunk_activations_from_environment()};
    out["kernels"] = {{"isa", kernels::isa_name(exec.isa)},
                      {"rvq_decode_crossover", engine.transformer().rvq_decode_crossover()},
                      {"trunk_activations", kernels::trunk_activations_name(exec.trunk)}};
    if (!args.session.empty()) {
      out["session"] = {{"path", args.session},
                        {"reused_tokens", reused},
                        {"saved_tokens", saved},
                        {"last_token_saved", last_token_run}};
    }
    if (routing.runs_router()) {
      out["lookahead"] = {{"k", routing_options.lookahead},
                          {"precision_at_1", guesses.precision_at_1()},
                          {"recall", guesses.recall()}};
    }
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("\n");
    std::fflush(stdout);  // the text ends before the summary on a shared terminal
    fmt::print(stderr,
               "sluice: {} tokens in {:.2f} s ({:.2f} tok/s); prompt {} tokens at {:.1f} tok/s; "
               "finish {}{}; seed {}; "
               "{}\n",
               stats.generated_tokens, stats.decode_seconds, numbers["tok_per_s"].get<double>(),
               stats.prompt_tokens, numbers["prefill_tok_per_s"].get<double>(), finish, finish_note, sampling.seed, experts_summary(stats.experts));
    if (!args.session.empty()) {
      fmt::print(
          stderr, "sluice: session {}: {} tokens reused{}, {} new prefilled; {} tokens saved{}\n",
          args.session, reused, resumed ? "" : " (a new session)", stats.prompt_tokens, saved,
          last_token_run ? "" : " (the context is full: the last generated token is not in it)");
    }
    if (routing.runs_router()) {
      fmt::print(stderr, "sluice: lookahead {}: guesses P@1 {:.1f}%, recall {:.1f}% of the real experts\n",
                 routing_options.lookahead, 100 * guesses.precision_at_1(), 100 * guesses.recall());
    }
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (streams to stdout, summary on stderr)");
  cmd->add_option("MODEL", args->model, "the .sluice container")->required();
  cmd->add_option("PROMPT", args->prompt, "prompt text, or - to read it from stdin");
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt as comma-separated token ids instead of text");
  cmd->add_option("-n,--max-tokens", args->max_tokens,
                  "tokens to generate (generation also ends at the context's end)")
      ->capture_default_str();
  add_sampling_flags(*cmd, args->sampling, args->seed);
  add_engine_flags(*cmd, args->engine);
  cmd->add_option("--dump-logits", args->dump_logits,
                  "write raw little-endian f32 logits: the row after the prompt, then one row after each "
                  "generated token (implies --ignore-eos)");
  cmd->add_option("--trace-out", args->trace_out,
                  "write the routing as JSON lines, one per token: {\"tok\": N, \"layers\": [[expert ids], ...]}");
  cmd->add_option("--lookahead", args->lookahead,
                  "experts of the next layer to prefetch per token (default SLUICE_LOOKAHEAD or 6; 0: off)");
  cmd->add_option(
      "--session", args->session,
      "resume the sequence saved in FILE (if it exists; it must come from this container), prefill "
      "only PROMPT's tokens after it, and save the sequence back to FILE after generating");
  add_image_flag(*cmd, args->images);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", args->json, "print one JSON object (text, token ids, statistics) instead of streaming");
  cmd->callback([args] { run(*args); });
}

}  // namespace sluice::cli
