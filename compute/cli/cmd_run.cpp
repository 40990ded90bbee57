// compute/cli/cmd_run.cpp: `sluice run`, text generation from a prompt. Text
// streams to stdout as it is generated; the summary goes to stderr so stdout
// stays pipeable. --dump-logits is the interface scripts/reference.py shares.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compute/cli/commands.h"
#include "compute/cli/run_options.h"
#include "compute/model/cached_expert_source.h"
#include "compute/model/engine.h"
#include "ioworker/rpc_socket.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "router/engine_tap.h"
#include "router/lookahead.h"

namespace sluice::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  uint32_t max_tokens = 128;
  SamplingParams sampling;
  EngineFlags engine;
  std::string dump_logits;
  bool ignore_eos = false;
  bool json = false;
  std::string trace_out;
  std::optional<uint32_t> lookahead;
};

void write_row(std::ofstream& out, std::span<const float> row, const std::string& path) {
  out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()));
  if (!out) fail("{}: cannot write logits", path);
}

void run(const RunArgs& args) {
  // Lookahead needs the embedded cache's worker: note it if the flags chose one.
  EngineOptions options = args.engine.options();
  CachedExpertSource* cached = nullptr;
  if (options.expert_source) {
    options.expert_source = [&cached, inner = options.expert_source](const Container& container) {
      auto source = inner(container);
      cached = dynamic_cast<CachedExpertSource*>(source.get());
      return source;
    };
  }
  Engine engine(args.model, options);
  router::EngineTap tap(engine.transformer(), static_cast<uint32_t>(engine.container().moe_layers().size()));
  std::optional<router::TraceWriter> trace;
  if (!args.trace_out.empty()) tap.set_trace(&trace.emplace(args.trace_out));
  const uint32_t lookahead = args.lookahead ? *args.lookahead : router::lookahead_from_environment();
  std::optional<router::Predictor> predictor;
  std::unique_ptr<router::Mailbox> mailbox;
  std::optional<router::Publisher> publisher;
  std::optional<router::Lookahead> router_thread;
  if (lookahead > 0 && cached != nullptr && cached->worker() != nullptr) {
    predictor.emplace(engine.container());
    mailbox = router::Mailbox::in_process({engine.config().hidden, 1, engine.config().top_k}, engine.container().identity());
    tap.set_publisher(&publisher.emplace(*mailbox, false));
    router_thread.emplace(*predictor, *mailbox, lookahead, [&cached](uint32_t layer, std::span<const uint32_t> experts) {
      cached->worker()->prefetch(layer, experts, ioworker::PrefetchOrigin::kRouter);
    });
    router_thread->start();
  } else if (lookahead > 0 && cached != nullptr && !args.engine.attach.empty()) {
    // Attached: sluice-router, if one serves this daemon, reads our mailbox.
    mailbox = router::Mailbox::open_shared(router::mailbox_path(ioworker::resolve_socket(args.engine.attach)),
                                           engine.container().identity());
    if (mailbox != nullptr && mailbox->geometry().hidden == engine.config().hidden) {
      tap.set_publisher(&publisher.emplace(*mailbox, false));
    }
  }
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load_from_container(args.model);
  std::vector<int32_t> prompt;
  if (!args.prompt_ids.empty()) {
    if (!args.prompt.empty()) fail("give either PROMPT or --prompt-ids, not both");
    prompt = parse_token_ids(args.prompt_ids, "--prompt-ids");
  } else {
    if (args.prompt.empty()) fail("no prompt: give PROMPT (or - for stdin) or --prompt-ids");
    prompt = tok.encode(args.prompt == "-" ? read_stdin() : args.prompt);
    if (tok.add_bos() && tok.bos_id()) prompt.insert(prompt.begin(), *tok.bos_id());
  }

  std::ofstream dump;
  if (!args.dump_logits.empty()) {
    dump.open(args.dump_logits, std::ios::binary | std::ios::trunc);
    if (!dump) fail("{}: cannot open for writing (--dump-logits)", args.dump_logits);
  }
  tokenizer::StreamingDecoder decoder(tok, true);
  std::vector<int32_t> generated;
  std::string text;
  const bool stream = !args.json;
  const GenerationStats stats = engine.generate(
      prompt, args.max_tokens, args.sampling, {}, args.ignore_eos || dump.is_open(),
      [&](int32_t token, std::span<const float> logits) {
        if (dump.is_open()) write_row(dump, logits, args.dump_logits);
        generated.push_back(token);
        const std::string piece = decoder.push(token);
        text += piece;
        if (stream) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
        return true;
      });
  if (router_thread) router_thread->stop();
  const std::string tail = decoder.finish();
  text += tail;
  if (dump.is_open() && !generated.empty()) {
    // The reference's last row: the logits after the last generated token.
    std::vector<float> logits(engine.config().vocab);
    engine.transformer().forward(std::span<const int32_t>(&generated.back(), 1), logits, false);
    write_row(dump, logits, args.dump_logits);
  }
  if (trace) trace->close();

  // The embedded router's guesses against the real routing, over every MoE layer.
  double guess_p1 = 0, guess_recall = 0;
  if (mailbox != nullptr) {
    uint64_t scored = 0, rank1 = 0, recalled = 0, real = 0;
    for (const router::LayerAccuracy& a : mailbox->accuracy()) {
      scored += a.scored;
      rank1 += a.rank1_hits;
      recalled += a.recalled;
      real += a.real;
    }
    guess_p1 = scored ? double(rank1) / double(scored) : 0.0;
    guess_recall = real ? double(recalled) / double(real) : 0.0;
  }
  const double decode_rate = stats.decode_seconds > 0 ? stats.generated_tokens / stats.decode_seconds : 0.0;
  const double prefill_rate = stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0.0;
  if (args.json) {
    nlohmann::json out = {{"text", text},
                          {"prompt_tokens", stats.prompt_tokens},
                          {"tokens", generated},
                          {"generated_tokens", stats.generated_tokens},
                          {"prefill_seconds", stats.prefill_seconds},
                          {"decode_seconds", stats.decode_seconds},
                          {"tok_per_s", decode_rate},
                          {"prefill_tok_per_s", prefill_rate},
                          {"experts", experts_json(stats.experts)}};
    if (router_thread) out["lookahead"] = {{"k", lookahead}, {"precision_at_1", guess_p1}, {"recall", guess_recall}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{}\n", tail);
    std::fflush(stdout);  // the text ends before the summary on a shared terminal
    fmt::print(stderr, "sluice: {} tokens in {:.2f} s ({:.2f} tok/s); prompt {} tokens at {:.1f} tok/s; {}\n",
               stats.generated_tokens, stats.decode_seconds, decode_rate, stats.prompt_tokens, prefill_rate,
               experts_summary(stats.experts));
    if (router_thread) {
      fmt::print(stderr, "sluice: lookahead {}: guesses P@1 {:.1f}%, recall {:.1f}% of the real experts\n", lookahead,
                 100 * guess_p1, 100 * guess_recall);
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
  cmd->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate")->capture_default_str();
  add_sampling_flags(*cmd, args->sampling);
  add_engine_flags(*cmd, args->engine);
  cmd->add_option("--dump-logits", args->dump_logits,
                  "write raw little-endian f32 logits: the row after the prompt, then one row after each "
                  "generated token (implies --ignore-eos)");
  cmd->add_option("--trace-out", args->trace_out,
                  "write the routing as JSON lines, one per token: {\"tok\": N, \"layers\": [[expert ids], ...]}");
  cmd->add_option("--lookahead", args->lookahead,
                  "experts of the next layer to prefetch per token (default SLUICE_LOOKAHEAD or 6; 0: off)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", args->json, "print one JSON object (text, token ids, statistics) instead of streaming");
  cmd->callback([args] { run(*args); });
}

}  // namespace sluice::cli
