// compute/cli/cmd_chat.cpp: `sluice chat`, a conversation in the terminal
// (libedit line editing and history) or over stdin, one line a user turn.
// Replies stream to stdout, reasoning and the per-turn summary to stderr.
// Ctrl-C stops the reply in progress, never the program.
#include <editline/readline.h>
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "compute/chat/json_constraint.h"
#include "compute/cli/chat_session.h"
#include "compute/cli/commands.h"
#include "compute/cli/interrupt.h"
#include "compute/cli/run_options.h"
#include "compute/host/hosted_model.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "proto/error.h"
#include "router/lookahead.h"

namespace sluice::cli {
namespace {

using json = nlohmann::ordered_json;

struct ChatArgs {
  std::string model;
  std::string system;
  uint32_t max_tokens = 512;
  SamplingParams sampling;
  int64_t seed = -1;
  EngineFlags engine;
  std::string json_schema;
  bool json_object = false;
  std::optional<bool> enable_thinking;
  std::vector<std::string> images;  // for the first user message
};

// Lines from libedit on a terminal, from stdin otherwise.
class LineSource {
 public:
  LineSource() : terminal_(::isatty(STDIN_FILENO) == 1) {}
  bool terminal() const { return terminal_; }
  std::optional<std::string> next() {
    if (!terminal_) {
      std::string line;
      if (!std::getline(std::cin, line)) return std::nullopt;
      return line;
    }
    char* raw = nullptr;
    while (!raw) {
      InterruptScope::clear();
      raw = ::readline("> ");
      // Ctrl-C at the prompt abandons the line, not the conversation.
      if (!raw && !InterruptScope::requested()) return std::nullopt;
      if (!raw) std::fputs("\n", stdout);
    }
    std::string line(raw);
    std::free(raw);
    if (!line.empty()) ::add_history(line.c_str());
    return line;
  }

 private:
  bool terminal_;
};

struct Totals {
  uint32_t turns = 0;
  uint64_t prompt = 0, reused = 0, prefilled = 0, generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  ExpertSourceStats experts;
};

void print_help() {
  fmt::print(stderr,
             "/reset        start the conversation again (the system message stays)\n"
             "/image FILE   attach an image to the next message (a model with a vision tower)\n"
             "/save FILE    write the conversation as a JSON array of messages\n"
             "/load FILE    continue a conversation written by /save\n"
             "/stats        tokens reused, prefilled and generated; speed; expert cache\n"
             "/quit         leave (as does Ctrl-D); Ctrl-C stops a reply\n");
}

json read_json(const std::string& path, const std::string& what) {
  const json parsed = json::parse(read_file(path, what), nullptr, false);
  if (parsed.is_discarded()) fail("{} {}: not valid JSON", what, path);
  return parsed;
}

void run(const ChatArgs& args) {
  if (args.json_object && !args.json_schema.empty())
    usage_error("give --json-object or --json-schema, not both");
  std::shared_ptr<const chat::JsonGrammar> grammar;
  if (!args.json_schema.empty()) {
    try {
      grammar = chat::JsonGrammar::from_schema(read_json(args.json_schema, "--json-schema"));
    } catch (const Error& e) {
      fail("--json-schema {}: {}", args.json_schema, e.what());
    }
  } else if (args.json_object) {
    grammar = chat::JsonGrammar::any_object();
  }

  EngineFlags flags = args.engine;
  flags.images = has_vision_tower(args.model);  // /image may load it at any turn
  flags.saved_states = 1;                // /save and /load hold a copy of the state
  RoutingOptions routing_options;
  routing_options.lookahead = router::lookahead_from_environment();
  HostedModel model(args.model, flags, routing_options,
                    [](size_t, size_t) { return !InterruptScope::requested(); });
  Engine& engine = model.engine();
  const tokenizer::Tokenizer& tok = model.tokenizer();
  RoutingSession& routing = model.routing();
  const auto format = chat::chat_format_for(engine.container(), tok);
  if (!format) {
    fail(
        "{}: the container has no chat template (tokenizer.chat_template is null in manifest.json)",
        args.model);
  }
  json extra = json::object();
  if (args.enable_thinking) extra["enable_thinking"] = *args.enable_thinking;
  ChatSession session(engine, tok, *format, extra);
  if (!args.system.empty()) session.set_system(args.system);
  for (const std::string& image : args.images) session.attach_image(image);

  TurnOptions turn_options;
  turn_options.max_tokens = args.max_tokens;
  turn_options.sampling = args.sampling;
  turn_options.sampling.seed = resolve_seed(args.seed);
  turn_options.grammar = grammar;

  LineSource lines;
  const bool fancy = ::isatty(STDERR_FILENO) == 1;
  if (lines.terminal()) {
    fmt::print(stderr, "sluice chat: {} (seed {}); /help for commands, Ctrl-D to leave\n",
               args.model, turn_options.sampling.seed);
  }
  const InterruptScope interrupt_scope(InterruptScope::Repeat::kEveryTime);
  Totals totals;
  bool failed = false;
  while (auto line = lines.next()) {
    InterruptScope::clear();
    std::string text = *line;
    if (text.empty()) continue;
    try {
      if (text[0] == '/') {
        const size_t space = text.find(' ');
        const std::string command = text.substr(0, space);
        const std::string arg = space == std::string::npos ? "" : text.substr(space + 1);
        if (command == "/quit" || command == "/exit") break;
        if (command == "/help") {
          print_help();
        } else if (command == "/reset") {
          session.reset();
          fmt::print(stderr, "[conversation reset]\n");
        } else if (command == "/save" && !arg.empty()) {
          try {
            session.save(arg);
          } catch (const Error& e) {
            fail("/save: {}", e.what());
          }
          fmt::print(stderr, "[saved {} messages to {}, the state to {}.session]\n",
                     session.messages().size(), arg, arg);
        } else if (command == "/load" && !arg.empty()) {
          bool restored = false;
          try {
            restored = session.load(arg);
          } catch (const Error& e) {
            fail("/load: {}", e.what());
          }
          fmt::print(stderr, "[loaded {} messages from {}{}]\n", session.messages().size(), arg,
                     restored ? fmt::format(", the state from {}.session", arg) : "");
        } else if (command == "/image" && !arg.empty()) {
          try {
            session.attach_image(arg);
          } catch (const Error& e) {
            fail("/image: {}", e.what());
          }
          fmt::print(stderr, "[image {} attached to the next message ({} waiting)]\n", arg,
                     session.attached_images());
        } else if (command == "/stats") {
          const double rate =
              totals.decode_seconds > 0 ? totals.generated / totals.decode_seconds : 0;
          const std::string images =
              engine.config().vision ? fmt::format("; vision tower runs {}", session.tower_runs())
                                     : "";
          fmt::print(stderr,
                     "[{} turns; prompt {} tokens: {} reused, {} prefilled; {} generated at {:.2f} "
                     "tok/s{}; {}]\n",
                     totals.turns, totals.prompt, totals.reused, totals.prefilled, totals.generated,
                     rate, images, experts_summary(totals.experts));
        } else {
          fail("{}: unknown command or missing FILE (/help lists them)", command);
        }
        continue;
      }
      bool reasoning_open = false;
      const TurnResult r = session.turn(
          text, turn_options,
          [&](const chat::ReplyEvent& e) {
            if (e.kind == chat::ReplyEvent::Kind::kReasoning) {
              if (fancy && !reasoning_open) fmt::print(stderr, "\033[2m");
              reasoning_open = true;
              std::fwrite(e.text.data(), 1, e.text.size(), stderr);
              std::fflush(stderr);
              return;
            }
            if (reasoning_open) {
              if (fancy) fmt::print(stderr, "\033[0m");
              fmt::print(stderr, "\n");
              reasoning_open = false;
            }
            if (e.kind == chat::ReplyEvent::Kind::kContent) {
              std::fwrite(e.text.data(), 1, e.text.size(), stdout);
            } else if (e.kind == chat::ReplyEvent::Kind::kToolCall) {
              fmt::print("\n[tool call {}] {} ", e.id, e.name);
            } else {
              std::fwrite(e.text.data(), 1, e.text.size(), stdout);
            }
            std::fflush(stdout);
          },
          [] { return !InterruptScope::requested(); });
      if (reasoning_open && fancy) fmt::print(stderr, "\033[0m");
      fmt::print("\n");
      std::fflush(stdout);
      const auto& s = r.stats;
      ++totals.turns;
      totals.prompt += r.prompt_tokens;
      totals.reused += r.reused;
      totals.prefilled += r.prefilled;
      totals.generated += s.generated_tokens;
      totals.prefill_seconds += s.prefill_seconds;
      totals.decode_seconds += s.decode_seconds;
      totals.experts = s.experts;
      const std::string finish = r.reply.tool_calls.empty() || s.finish == FinishReason::kCancelled
                                     ? finish_reason_name(s.finish)
                                     : "tool_calls";
      std::string json_note;
      if (grammar) json_note = r.json_valid ? "; json valid" : "; json incomplete";
      fmt::print(
          stderr,
          "[prompt {} tokens: {} reused, {} prefilled; {} tokens at {:.2f} tok/s; finish {}{}]\n",
          r.prompt_tokens, r.reused, r.prefilled, s.generated_tokens,
          s.decode_seconds > 0 ? s.generated_tokens / s.decode_seconds : 0.0, finish, json_note);
    } catch (const Error& e) {
      fmt::print(stderr, "sluice: error: {}\n", e.what());
      failed = true;
    }
  }
  routing.finish();
  if (failed && !lines.terminal()) throw ExitStatus{1};
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat",
                                     "Talk with the model through its chat template (a terminal, "
                                     "or one user turn per stdin line)");
  cmd->add_option("MODEL", args->model, "the .sluice container")->required();
  cmd->add_option("--system", args->system, "the system message");
  cmd->add_option("-n,--max-tokens", args->max_tokens, "tokens per reply at most")
      ->capture_default_str();
  add_sampling_flags(*cmd, args->sampling, args->seed);
  add_engine_flags(*cmd, args->engine);
  cmd->add_option("--json-schema", args->json_schema,
                  "JSON Schema file: every reply is constrained to one value of it");
  cmd->add_flag("--json-object", args->json_object,
                "every reply is constrained to one JSON object");
  add_thinking_flags(*cmd, args->enable_thinking);
  cmd->add_option(
      "--image", args->images,
      "an image file (JPEG, PNG, BMP, GIF, PSD, TGA) for the first user message of a "
      "model with a vision tower (Kimi K3); repeatable. /image FILE attaches one later");
  cmd->callback([args] { run(*args); });
}

}  // namespace sluice::cli
