// compute/cli/cmd_template.cpp: `sluice template`, a container's chat format
// (its Jinja template, or Kimi K3's XTML) rendered on messages from a file, as
// text, token ids or JSON with the content/markup segments. Loads the
// manifest and tokenizer only, never the trunk or an expert.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <optional>
#include <string>

#include "compute/chat/chat_format.h"
#include "compute/cli/commands.h"
#include "compute/cli/run_options.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::cli {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxInputBytes = size_t{64} << 20;

// A JSON file ('-' is stdin); `flag` names it in errors.
json read_json_file(const std::string& path, const std::string& flag) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{} {}: cannot open the file", flag, path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  if (text.size() > kMaxInputBytes) fail("{} {}: larger than {} bytes", flag, path, kMaxInputBytes);
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) fail("{} {}: not valid JSON", flag, path);
  return parsed;
}

struct TemplateOptions {
  std::string model;
  std::string messages_file;
  std::string tools_file;
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;
  bool raw = false;
  bool ids = false;
  bool json_output = false;
};

void run(const TemplateOptions& o) {
  const Container container = Container::open(o.model, posix_file_system(), OpenMode::kBuffered);
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load_from_container(container.dir());
  const auto format = chat::chat_format_for(container, tokenizer);
  if (!format) {
    fail(
        "{}: the container has no chat template (tokenizer.chat_template is null in manifest.json)",
        o.model);
  }

  chat::ChatInput input = chat::chat_input_from_request(
      read_json_file(o.messages_file, "--messages"), fmt::format("--messages {}", o.messages_file));
  if (!o.tools_file.empty()) {
    input.tools = read_json_file(o.tools_file, "--tools");
    if (!input.tools.is_array()) fail("--tools {}: expected an array of tools", o.tools_file);
  }
  input.raw_messages = o.raw;
  input.add_generation_prompt = o.add_generation_prompt;
  if (o.enable_thinking) input.extra["enable_thinking"] = *o.enable_thinking;

  const chat::Rendered rendered = format->render(input);
  std::vector<tokenizer::TokenId> ids;
  if (o.ids) ids = format->tokenize(rendered);
  if (o.json_output) {
    json segments = json::array();
    for (const auto& s : rendered.segments)
      segments.push_back({{"text", s.text}, {"content", s.content}});
    json out = {{"prompt", rendered.text()}, {"segments", segments}};
    if (o.ids) out["ids"] = ids;
    fmt::print("{}\n", out.dump(-1, ' ', false, json::error_handler_t::replace));
  } else if (o.ids) {
    fmt::print("{}\n", fmt::join(ids, " "));
  } else {
    const std::string text = rendered.text();
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  auto* cmd = app.add_subcommand("template",
                                 "Render the container's chat template (or Kimi K3's XTML) on "
                                 "messages, exactly as the prompt the model would see");
  cmd->add_option("MODEL", o->model, "a .sluice container directory")->required();
  cmd->add_option(
         "--messages", o->messages_file,
         "JSON file ('-' for stdin): an array of OpenAI chat messages, or a request object with "
         "\"messages\" (and \"tools\", \"tool_choice\", \"response_format\", "
         "\"reasoning_effort\")")
      ->required();
  cmd->add_option("--tools", o->tools_file, "JSON file with an array of OpenAI tool definitions");
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt,
                "end with the header of the assistant's turn");
  add_thinking_flags(*cmd, o->enable_thinking);
  cmd->add_flag("--raw", o->raw,
                "pass the messages to the template as given, without normalising them");
  cmd->add_flag("--ids", o->ids,
                "print token ids instead of text (control tokens only from the template, never "
                "from messages)");
  cmd->add_flag("--json", o->json_output,
                "print {prompt, segments: [{text, content}], ids (with --ids)}");
  cmd->callback([o] { run(*o); });
}

}  // namespace sluice::cli
