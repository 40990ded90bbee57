// tests/compute/chat/robustness_test.cpp: damaged templates. Thousands of
// seeded mutations of the fixture templates either render or fail with a
// ChatTemplateError naming the template; nothing else escapes or crashes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "compute/chat/chat_template.h"

using json = nlohmann::ordered_json;

namespace {

std::string fixture(const std::string& name) {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  const auto path = std::filesystem::path(root ? root : ".") / "tests" / "compute" / "chat" / name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

sluice::chat::ChatInput conversation() {
  sluice::chat::ChatInput in;
  in.messages = json::array(
      {{{"role", "system"}, {"content", "sys"}},
       {{"role", "user"}, {"content", "hi"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", json::array({{{"id", "c"},
                                     {"type", "function"},
                                     {"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "c"}, {"content", "r"}}});
  in.tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  in.add_generation_prompt = true;
  in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  return in;
}

}  // namespace

TEST_CASE("mutated templates render or fail with a named ChatTemplateError") {
  const std::string kAlphabet = "{}%#-+()[]'\"|.~:,=! \n\\abx0";
  std::mt19937_64 rng(12);
  const sluice::chat::ChatInput input = conversation();
  sluice::chat::RenderLimits limits;
  limits.max_steps = 100000;
  int rendered = 0, refused = 0;
  for (const char* name :
       {"templates/kimi_k2.jinja", "templates/mixtral.jinja", "templates/olmoe_tulu.jinja"}) {
    const std::string original = fixture(name);
    for (int i = 0; i < 1500; ++i) {
      std::string source = original;
      for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
        const size_t at = rng() % source.size();
        switch (rng() % 3) {
          case 0:
            source.erase(at, 1 + rng() % 3);
            break;
          case 1:
            source.insert(at, 1, kAlphabet[rng() % kAlphabet.size()]);
            break;
          default:
            source[at] = kAlphabet[rng() % kAlphabet.size()];
            break;
        }
        if (source.empty()) source = "x";
      }
      try {
        sluice::chat::ChatTemplate::parse(source, "mutant").render(input, limits);
        ++rendered;
      } catch (const sluice::chat::ChatTemplateError& e) {
        CHECK(std::string(e.what()).rfind("chat template mutant line ", 0) == 0);
        ++refused;
      }
    }
  }
  // Both outcomes happen, so the mutations reach the renderer and the checks.
  CHECK(rendered > 100);
  CHECK(refused > 100);
}
