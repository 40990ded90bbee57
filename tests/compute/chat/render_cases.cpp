// tests/compute/chat/render_cases.cpp: the C++ side of the jinja2
// differential test. Reads one JSON case per line on stdin (template file,
// messages, tools, flags) and prints one JSON result per line: the render,
// or the error; with "normalize", the messages after normalisation too.
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "compute/chat/chat_template.h"
#include "compute/chat/normalize.h"

using json = nlohmann::ordered_json;

int main() {
  std::map<std::string, sluice::chat::ChatTemplate> templates;
  std::string line;
  while (std::getline(std::cin, line)) {
    const json c = json::parse(line);
    const std::string path = c.at("template").get<std::string>();
    json result = json::object();
    try {
      auto it = templates.find(path);
      if (it == templates.end()) {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read " + path);
        std::stringstream text;
        text << in.rdbuf();
        it = templates.emplace(path, sluice::chat::ChatTemplate::parse(text.str(), path)).first;
      }
      sluice::chat::ChatInput input;
      input.messages = c.at("messages");
      if (c.value("normalize", false)) {
        input.messages = sluice::chat::normalize_messages(
            input.messages, sluice::chat::normalize_options_for(it->second));
        result["messages"] = input.messages;
      }
      input.tools = c.value("tools", json(nullptr));
      input.add_generation_prompt = c.value("add_generation_prompt", false);
      input.special_tokens = c.value("special_tokens", json::object());
      input.extra = c.value("extra", json::object());
      const sluice::chat::Rendered r = it->second.render(input);
      result["ok"] = true;
      result["text"] = r.text();
      std::string content;
      for (const auto& s : r.segments) {
        if (s.content) content += s.text;
      }
      result["content"] = content;
    } catch (const sluice::chat::ChatTemplateError& e) {
      result["ok"] = false;
      result["error"] = e.what();
      result["raised"] = e.raised;
      result["reason"] = e.reason;
    } catch (const std::exception& e) {
      result["ok"] = false;
      result["error"] = e.what();
      result["raised"] = false;
    }
    std::cout << result.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}
