// compute/cli/cmd_tokenize.cpp: `sluice tokenize` and `sluice detokenize`, the
// tokenizer on the command line. Prints ids or text and nothing else on
// stdout; never loads anything of a model but its tokenizer files.
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compute/cli/commands.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "proto/file_io.h"

namespace sluice::cli {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

struct Source {
  std::vector<std::string> args;  // [MODEL] INPUT...
  std::string tokenizer_file;
};

// `several_inputs`: INPUT may come as several arguments (detokenize's
// `MODEL 1 2 3`), joined with spaces.
void add_source_options(CLI::App* cmd, Source& source, const char* input_name,
                        bool several_inputs) {
  cmd->add_option(
         "args", source.args,
         fmt::format(
             "MODEL {0} (MODEL: a .sluice container directory), or just {0} with --tokenizer; "
             "{0} '-' reads stdin",
             input_name))
      ->expected(1, several_inputs ? CLI::detail::expected_max_vector_size : 2)
      ->required();
  cmd->add_option(
      "--tokenizer", source.tokenizer_file,
      "a tokenizer.json or tiktoken.model to use instead of a container's (a tokenizer_config.json "
      "beside it is read too)");
}

struct Opened {
  Tokenizer tokenizer;
  std::string input;    // the remaining INPUT argument
  double load_seconds;  // reading and checking the tokenizer's files
};

Tokenizer load(const Source& source) {
  if (!source.tokenizer_file.empty()) {
    const std::string dir = std::filesystem::path(source.tokenizer_file).parent_path().string();
    const std::string config = (dir.empty() ? std::string(".") : dir) + "/tokenizer_config.json";
    const bool has_config = posix_file_system().exists(config);
    return Tokenizer::load(source.tokenizer_file, has_config ? config : "");
  }
  return Tokenizer::load_from_container(source.args[0]);
}

// Resolves the tokenizer and returns it with the remaining INPUT argument.
Opened open(const Source& source, const char* input_name, bool several_inputs) {
  const size_t inputs_from = source.tokenizer_file.empty() ? 1 : 0;
  const size_t inputs = source.args.size() - std::min(source.args.size(), inputs_from);
  if (inputs == 0 || (!several_inputs && inputs > 1)) {
    if (inputs_from == 0)
      usage_error("--tokenizer takes the place of MODEL: give only {}", input_name);
    usage_error("give MODEL and {}, or --tokenizer FILE and {}", input_name, input_name);
  }
  std::string input = source.args[inputs_from];
  for (size_t i = inputs_from + 1; i < source.args.size(); ++i) input += " " + source.args[i];
  const auto start = std::chrono::steady_clock::now();
  Tokenizer tokenizer = load(source);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {std::move(tokenizer), input, seconds};
}

std::string read_input(const std::string& arg) {
  if (arg != "-") return arg;
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) fail("reading stdin failed");
  return text;
}

std::vector<TokenId> parse_id_list(const std::string& text);

// Ids separated by commas and/or whitespace (brackets are ignored), or the
// object `tokenize --json` prints, so its output can be piped straight back in.
std::vector<TokenId> parse_ids(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return parse_id_list(text);
  const auto object = nlohmann::json::parse(text, nullptr, false);
  if (object.is_discarded() || !object.is_object() || !object.contains("ids") || !object["ids"].is_array())
    usage_error("IDS: a JSON object must be `tokenize --json`'s, with an \"ids\" list");
  std::string list;
  for (const auto& id : object["ids"]) list += id.dump() + " ";
  return parse_id_list(list);
}

std::vector<TokenId> parse_id_list(const std::string& text) {
  std::vector<TokenId> ids;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > INT32_MAX)
      usage_error("IDS: \"{}\" is not a token id", item);
    ids.push_back(static_cast<TokenId>(value));
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' || c == ']') {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return ids;
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  struct TokenizeOptions {
    Source source;
    bool json = false;
    bool specials = false;
    bool verbose = false;
    bool bos = false;
  };
  auto opts = std::make_shared<TokenizeOptions>();
  auto* tok = app.add_subcommand("tokenize", "Turn text into token ids (space separated on one line)");
  add_source_options(tok, opts->source, "TEXT", false);
  tok->add_flag("--json", opts->json,
                "print {\"ids\": [...], \"tokenizer\": {\"file\": the file it was loaded from, "
                "\"load_seconds\": ...}}");
  tok->add_flag("--specials", opts->specials,
                "recognise special-token text (e.g. <|im_end|>) as control tokens; without it TEXT is plain content");
  tok->add_flag("--verbose", opts->verbose, "print one 'id<TAB>token' line per token (token as a JSON string)");
  tok->add_flag("--bos", opts->bos, "put the tokenizer_config.json bos_token first");
  tok->callback([opts] {
    if (opts->json && opts->verbose) usage_error("--json and --verbose exclude each other");
    auto [tokenizer, input, load_seconds] = open(opts->source, "TEXT", false);
    const std::string text = read_input(input);
    std::vector<TokenId> ids;
    if (opts->bos) {
      const auto bos = tokenizer.bos_id();
      if (!bos) fail("--bos: the tokenizer has no bos_token (tokenizer_config.json)");
      ids.push_back(*bos);
    }
    const auto body = opts->specials ? tokenizer.encode_with_specials(text) : tokenizer.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (opts->json) {
      const nlohmann::json out = {
          {"ids", ids}, {"tokenizer", {{"file", tokenizer.loaded_from()}, {"load_seconds", load_seconds}}}};
      fmt::print("{}\n", out.dump());
    } else if (opts->verbose) {
      for (TokenId id : ids)
        fmt::print("{}\t{}\n", id, nlohmann::json(*tokenizer.id_to_token(id)).dump());
    } else {
      fmt::print("{}\n", fmt::join(ids, " "));
    }
  });

  struct DetokenizeOptions {
    Source source;
    bool skip_special = false;
  };
  auto dopts = std::make_shared<DetokenizeOptions>();
  auto* detok = app.add_subcommand("detokenize",
                                   "Turn token ids (comma or space separated, in one argument or "
                                   "several; '[1, 2]' too) back into text, "
                                   "printed exactly, with no newline added");
  add_source_options(detok, dopts->source, "IDS", true);
  detok->add_flag("--skip-special", dopts->skip_special, "leave special tokens out of the text");
  detok->callback([dopts] {
    auto [tokenizer, input, load_seconds] = open(dopts->source, "IDS", true);
    const std::string text = tokenizer.decode(parse_ids(read_input(input)), dopts->skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace sluice::cli
