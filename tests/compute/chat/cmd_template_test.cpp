// tests/compute/chat/cmd_template_test.cpp: `sluice template` as a user runs
// it (SLUICE_BIN) on a fixture container carrying a ChatML-style template and
// a tiny tokenizer whose ids are bytes, so expected ids are worked by hand.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/compute/tokenizer/tiny_tokenizer.h"
#include "tests/proto/container_fixture.h"

namespace {

struct Result {
  int status;
  std::string out;  // stdout
  std::string err;
};

Result run(const std::string& args) {
  const char* bin = std::getenv("SLUICE_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "SLUICE_BIN is not set");
  const std::string err_file = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                               "/sluice-template-test-stderr-" + std::to_string(getpid());
  const std::string command = std::string("'") + bin + "' " + args + " 2>'" + err_file + "'";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  std::ifstream err_in(err_file);
  std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  std::remove(err_file.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err};
}

const char* const kTemplate =
    "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
    "'<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ 'NO-THINK' }}{% endif %}{% "
    "endif %}\n";

struct Model {
  sluice::testing::TempDir tmp;
  std::string dir;
  Model(bool with_template = true) {
    sluice::testing::FixtureSpec spec;
    if (with_template) spec.chat_template = kTemplate;
    dir = tmp.path();
    sluice::testing::write_fixture(dir, spec);
    tiny::Spec tok;
    tok.added = nlohmann::json::array({tiny::added_token(256, "<|im_start|>", true),
                                       tiny::added_token(257, "<|im_end|>", true),
                                       tiny::added_token(258, "<s>", true)});
    sluice::testing::write_bytes(dir + "/tokenizer.json", tiny::json_of(tok).dump());
    sluice::testing::write_bytes(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  }
  std::string messages(const std::string& name, const std::string& body) const {
    const std::string path = dir + "/" + name;
    sluice::testing::write_bytes(path, body);
    return path;
  }
};

std::string ids_of(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (out.empty() ? "" : " ") + std::to_string(c);
  return out;
}

}  // namespace

TEST_CASE("template prints the prompt exactly, with bos from tokenizer_config.json") {
  Model m;
  const std::string msgs = m.messages("m.json", R"([{"role": "user", "content": "hi"}])");
  const Result r =
      run("template '" + m.dir + "' --messages '" + msgs + "' --add-generation-prompt");
  CHECK(r.status == 0);
  CHECK(r.out == "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(run("template '" + m.dir + "' --messages '" + msgs + "'").out ==
        "<s><|im_start|>user\nhi<|im_end|>\n");
  CHECK(run("template '" + m.dir + "' --messages '" + msgs +
            "' --add-generation-prompt --disable-thinking")
            .out == "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nNO-THINK");
}

TEST_CASE("--ids: control tokens come from the template only") {
  Model m;
  const std::string msgs = m.messages("m.json", R"([{"role": "user", "content": "<|im_end|>"}])");
  // The bos_token the template writes is a control token too; no second one is added.
  const Result r = run("template '" + m.dir + "' --messages '" + msgs + "' --ids");
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out == "258 256 " + ids_of("user\n<|im_end|>") + " 257 10\n");
}

TEST_CASE("--json shows which text is content") {
  Model m;
  const std::string msgs =
      m.messages("m.json", R"({"messages": [{"role": "user", "content": "yo"}]})");
  const Result r = run("template '" + m.dir + "' --messages '" + msgs + "' --json");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["prompt"] == "<s><|im_start|>user\nyo<|im_end|>\n");
  REQUIRE(j["segments"].size() == 5);
  CHECK(j["segments"][1] == nlohmann::json{{"text", "user"}, {"content", true}});
  CHECK(j["segments"][3] == nlohmann::json{{"text", "yo"}, {"content", true}});
}

TEST_CASE("content null is normalised; --raw shows the template's own failure") {
  Model m;
  const std::string msgs = m.messages(
      "m.json",
      R"([{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}])");
  CHECK(run("template '" + m.dir + "' --messages '" + msgs + "'").out ==
        "<s><|im_start|>assistant\n<|im_end|>\n");
  const Result raw = run("template '" + m.dir + "' --messages '" + msgs + "' --raw");
  CHECK(raw.status == 1);
  CHECK(raw.err.find("chat template " + m.dir +
                     " chat_template line 1: can only concatenate str (not \"NoneType\")") !=
        std::string::npos);
}

TEST_CASE("bad input is named") {
  Model m;
  const std::string bad = m.messages("bad.json", "[{");
  Result r = run("template '" + m.dir + "' --messages '" + bad + "'");
  CHECK(r.status == 1);
  CHECK(r.err == "sluice: error: --messages " + bad + ": not valid JSON\n");
  r = run("template '" + m.dir + "' --messages '" + m.dir + "/missing.json'");
  CHECK(r.err == "sluice: error: --messages " + m.dir + "/missing.json: cannot open the file\n");
  const std::string image = m.messages(
      "img.json",
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  r = run("template '" + m.dir + "' --messages '" + image + "'");
  CHECK(r.err ==
        "sluice: error: messages[0].content[0]: part type 'image_url' is not supported (this model "
        "reads text only)\n");

  Model plain(false);
  const std::string msgs = plain.messages("m.json", "[]");
  r = run("template '" + plain.dir + "' --messages '" + msgs + "'");
  CHECK(r.status == 1);
  CHECK(r.err.find("the container has no chat template") != std::string::npos);
}
