// tests/compute/chat/chat_template_test.cpp: the interpreter's semantics
// that bite (serving.md 6), its errors, limits and sandbox, and provenance:
// which bytes of a render are content and which are markup.
#include "compute/chat/chat_template.h"

#include <doctest/doctest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

using json = nlohmann::ordered_json;
using sluice::chat::ChatInput;
using sluice::chat::ChatTemplate;
using sluice::chat::ChatTemplateError;
using sluice::chat::Rendered;

namespace {

ChatInput input_with(json messages = json::array(), json extra = json::object()) {
  ChatInput in;
  in.messages = std::move(messages);
  in.extra = std::move(extra);
  return in;
}

std::string render(const std::string& source, const ChatInput& in = input_with()) {
  return ChatTemplate::parse(source, "t").render(in).text();
}

std::string content_of(const Rendered& r) {
  std::string out;
  for (const auto& s : r.segments) {
    if (s.content) out += s.text;
  }
  return out;
}

ChatTemplateError render_error(const std::string& source, const ChatInput& in = input_with()) {
  try {
    ChatTemplate::parse(source, "bad.jinja").render(in);
  } catch (const ChatTemplateError& e) {
    return e;
  }
  FAIL("no error from: " << source);
  return ChatTemplateError("", 0, false, "");
}

}  // namespace

TEST_CASE("values print the way Python prints them") {
  CHECK(render("{{ none }} {{ true }} {{ false }} {{ 3 }} {{ 2.0 }} {{ 7 / 2 }} {{ 1e21 }} {{ 1e-5 "
               "}}") == "None True False 3 2.0 3.5 1e+21 1e-05");
  CHECK(render("{{ [1, 'a', none, [true]] }}") == "[1, 'a', None, [True]]");
  CHECK(render("{{ {'k': 'it\\'s', 'q': \"say \\\"hi\\\"\"} }}") ==
        "{'k': \"it's\", 'q': 'say \"hi\"'}");
  CHECK(render("[{{ nothing }}]") == "[]");
}

TEST_CASE("a missing key is undefined: neither none nor defined") {
  const ChatInput in = input_with(json::array({{{"role", "user"}}}));
  CHECK(render("{{ messages[0].content is none }} {{ messages[0].content is defined }}", in) ==
        "False False");
  CHECK(render("{{ messages[0]['content'] is none }}", in) == "False");
  CHECK(render("{{ messages[5] is defined }}", in) == "False");
}

TEST_CASE("precedence: filters bind tighter than arithmetic, not tighter than is") {
  const ChatInput in = input_with(json::array({{{"role", "user"}}, {{"role", "user"}}}));
  CHECK(render("{{ messages|length - 1 }}", in) == "1");
  CHECK(render("{{ not x is defined }} {{ -2|abs }} {{ 1 + 2 * 3 ** 2 }} {{ 'a' ~ 2 * 3 }}") ==
        "True 2 19 a6");
  // ~ binds tighter than +, so this adds an int to a string.
  CHECK_THROWS_AS(render("{{ 'a' ~ 1 + 2 }}"), ChatTemplateError);
  CHECK(render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{% endfor %}", in) ==
        "1021");
}

TEST_CASE("whitespace control as Hugging Face configures jinja2") {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indent before it.
  CHECK(render("a\n  {% if true %}\n  b\n  {% endif %}\nc") == "a\n  b\nc");
  // lstrip_blocks does not apply before {{.
  CHECK(render("x\n  {{ 'y' }}") == "x\n  y");
  CHECK(render("a   {%- if true -%}   b   {%- endif %}") == "ab");
  CHECK(render("a\n{#- gone -#}\n b") == "ab");
  CHECK(render("a\n  {%+ if true %}b{% endif %}") == "a\n  b");
  // One final newline is dropped, not two; \r\n reads as \n.
  CHECK(render("x\n\n") == "x\n");
  CHECK(render("a\r\nb\r\n") == "a\nb");
  CHECK(render("{% raw %}{{ x }}{% endraw %}") == "{{ x }}");
}

TEST_CASE("string literals take Python escapes and may span lines") {
  CHECK(render("{{ 'a\\tb\\n\\x41\\u00e9\\\\' }}") == "a\tb\nA\xc3\xa9\\");
  CHECK(render("{{ 'line\nbreak' }}") == "line\nbreak");
  CHECK(render("{{ 'ab' 'cd' }}") == "abcd");
}

TEST_CASE("loops: filters, else, break, continue and scoping") {
  CHECK(render("{% for i in range(6) if i is odd %}{{ i }}{% endfor %}") == "135");
  CHECK(render("{% for i in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}") ==
        "012");
  CHECK(render("{% for i in range(4) %}{% if i is even %}{% continue %}{% endif %}{{ i }}{% endfor "
               "%}") == "13");
  // set inside a loop does not leak out; a namespace does.
  CHECK(render("{% set n = 0 %}{% for i in range(3) %}{% set n = n + 1 %}{% endfor %}{{ n }}") ==
        "0");
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + 1 %}{% "
               "endfor %}{{ ns.n }}") == "3");
  CHECK(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}") == "3,7,");
  CHECK(render("{{ range(5, 0, -2) | list }}") == "[5, 3, 1]");
}

TEST_CASE("macros, call blocks and block set") {
  CHECK(
      render("{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}") ==
      "<1d><2e>");
  CHECK(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}") ==
        "[in]");
  CHECK(render("{% set b %}x{{ 1 + 1 }}{% endset %}{{ b ~ b }}") == "x2x2");
}

TEST_CASE("string and dict methods, slicing") {
  const ChatInput in =
      input_with(json::array(), {{"s", "  <think>a</think>\n\nb  "}, {"d", {{"k", 1}}}});
  CHECK(render("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.strip() }}", in) ==
        "b  |<think>a</think>\n\nb");
  CHECK(render(
            "{{ d.get('k') }} {{ d.get('z') }} {{ d.get('z', 2) }} {{ d.items() | list | length }}",
            in) == "1 None 2 1");
  CHECK(render("{{ 'héllo'[::-1] }} {{ 'héllo'[1:3] }} {{ [1, 2, 3][-1] }} {{ "
               "'abc'.startswith(('x', 'a')) }}") == "olléh él 3 True");
  CHECK(render("{{ 'a b'.upper() }} {{ 'A-b c' | title }} {{ 'x,y'.replace(',', ';') }}") ==
        "A B A-B C x;y");
}

TEST_CASE("tojson is json.dumps without HTML escaping") {
  const ChatInput in =
      input_with(json::array(), {{"v", {{"b", "<é>&'\n"}, {"a", {1.5, nullptr, true}}}}});
  CHECK(render("{{ v | tojson }}", in) == "{\"b\": \"<é>&'\\n\", \"a\": [1.5, null, true]}");
  CHECK(render("{{ v | tojson(separators=(',', ':'), sort_keys=true) }}", in) ==
        "{\"a\":[1.5,null,true],\"b\":\"<é>&'\\n\"}");
  CHECK(render("{{ v.a | tojson(indent=2) }}", in) == "[\n  1.5,\n  null,\n  true\n]");
}

TEST_CASE("errors name the template and the line") {
  const ChatTemplateError syntax = render_error("line one\n{% if x %}\nunclosed");
  CHECK(std::string(syntax.what()).find("chat template bad.jinja line") == 0);
  CHECK(std::string(syntax.what()).find("endif") != std::string::npos);
  CHECK_FALSE(syntax.raised);

  const ChatTemplateError runtime = render_error("a\nb\n{{ none + 1 }}");
  CHECK(runtime.line == 3);
  CHECK(std::string(runtime.what()) ==
        "chat template bad.jinja line 3: unsupported operand type(s) for +: 'NoneType' and 'int'");

  CHECK(render_error("{{ 'x\n").line == 1);
  CHECK(std::string(render_error("{% include 'x' %}").what()).find("unsupported tag 'include'") !=
        std::string::npos);
}

TEST_CASE("raise_exception surfaces the template's own message") {
  const ChatTemplateError e =
      render_error("\n\n{{ raise_exception('Roles must alternate: ' ~ 'user/assistant') }}");
  CHECK(e.raised);
  CHECK(e.reason == "Roles must alternate: user/assistant");
  CHECK(e.line == 3);
}

TEST_CASE("undefined fails on use, as jinja2's default Undefined does") {
  CHECK(std::string(render_error("{{ nothing.attr }}").what()).find("'nothing' is undefined") !=
        std::string::npos);
  render_error("{{ nothing + 'x' }}");
  render_error("{{ nothing() }}");
  CHECK(render("{{ nothing | length }}{% for x in nothing %}x{% endfor %}{{ 'a' in nothing }}") ==
        "0False");
  // Qwen3's trap: `in` on None is a TypeError.
  render_error("{{ '</think>' in none }}");
}

TEST_CASE("the sandbox refuses to mutate lists and dicts") {
  CHECK(std::string(render_error("{% set l = [] %}{{ l.append(1) }}").what()).find("unsafe") !=
        std::string::npos);
  render_error("{% set d = {} %}{{ d.update({'a': 1}) }}");
}

TEST_CASE("limits stop runaway templates") {
  sluice::chat::RenderLimits limits;
  limits.max_output_bytes = 1000;
  const ChatTemplate big =
      ChatTemplate::parse("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", "big");
  CHECK_THROWS_WITH_AS(big.render(input_with(), limits), doctest::Contains("output exceeds"),
                       ChatTemplateError);
  const ChatTemplate recursive =
      ChatTemplate::parse("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "rec");
  CHECK_THROWS_WITH_AS(recursive.render(input_with()), doctest::Contains("nested deeper"),
                       ChatTemplateError);
  const ChatTemplate slow = ChatTemplate::parse(
      "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "slow");
  sluice::chat::RenderLimits few_steps;
  few_steps.max_steps = 50000;
  CHECK_THROWS_WITH_AS(slow.render(input_with(), few_steps), doctest::Contains("too many steps"),
                       ChatTemplateError);
  CHECK_THROWS_WITH_AS(
      ChatTemplate::parse("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}",
                          "deep"),
      doctest::Contains("nested too deeply"), ChatTemplateError);
  CHECK_THROWS_WITH_AS(render("{{ range(200000) | length }}"), doctest::Contains("MAX_RANGE"),
                       ChatTemplateError);
}

TEST_CASE("provenance: message text is content, template text is markup") {
  ChatInput in = input_with(json::array({{{"role", "user"}, {"content", "hi <|im_end|>"}}}));
  in.special_tokens = {{"bos_token", "<s>"}};
  const ChatTemplate t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + "
      "m.content.upper() + '<|im_end|>' }}"
      "{% endfor %}",
      "t");
  const Rendered r = t.render(in);
  CHECK(r.text() == "<s><|im_start|>user\nHI <|IM_END|><|im_end|>");
  CHECK(content_of(r) == "userHI <|IM_END|>");
  REQUIRE(r.segments.size() == 5);
  CHECK_FALSE(r.segments[0].content);
  CHECK(r.segments[0].text == "<s><|im_start|>");
}

TEST_CASE("provenance survives slicing, splitting, replace and tojson") {
  ChatInput in = input_with(json::array({{{"role", "user"}, {"content", "a</think>b"}}}));
  in.tools = json::array({{{"name", "f<x>"}}});
  const ChatTemplate t = ChatTemplate::parse(
      "{{ messages[0].content.split('</think>')[-1] }}|{{ messages[0].content[:1] }}|"
      "{{ messages[0].content.replace('</think>', '[T]') }}|{{ tools | tojson }}",
      "t");
  const Rendered r = t.render(in);
  CHECK(r.text() == "b|a|a[T]b|[{\"name\": \"f<x>\"}]");
  // The replacement came from the template; the JSON punctuation too.
  CHECK(content_of(r) == "baabnamef<x>");
}

TEST_CASE("Hugging Face's extras: strftime_now, {% generation %}, tools as None") {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string year = std::to_string(local.tm_year + 1900);
  const std::string got = render("{{ strftime_now('%Y') }}");
  // A render straddling New Year's midnight may see the next year.
  CHECK((got == year || got == std::to_string(local.tm_year + 1901)));
  CHECK(render("a{% generation %}b{% endgeneration %}c") == "abc");
  CHECK(render("{{ tools is none }} {{ tools is defined }} {{ documents is none }}") ==
        "True True True");
}

TEST_CASE("strings a template builds are bounded") {
  CHECK_THROWS_WITH_AS(render("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}"
                              "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
                       doctest::Contains("~: result larger than"), ChatTemplateError);
  CHECK_THROWS_WITH_AS(
      render("{{ ('x' * 1000000).replace('x', "
             "'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}"),
      doctest::Contains("replace: result larger than"), ChatTemplateError);
}

TEST_CASE("deeply nested values are refused, not a stack overflow") {
  json deep = "x";
  for (int i = 0; i < 600; ++i) deep = json::array({deep});
  ChatInput in = input_with(json::array({{{"role", "user"}, {"content", deep}}}));
  CHECK_THROWS_WITH_AS(ChatTemplate::parse("{{ messages }}", "t").render(in),
                       doctest::Contains("nested deeper than"), sluice::Error);
  CHECK_THROWS_WITH_AS(
      render("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}"
             "{% endfor %}{{ ns.l }}"),
      doctest::Contains("nested deeper than"), ChatTemplateError);
}
