// tests/compute/chat/normalize_test.cpp: OpenAI-shaped messages reshaped for
// real templates (serving.md 6 "traps"), the options read from a template,
// and the errors naming the message that cannot be shown.
#include "compute/chat/normalize.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "compute/chat/chat_template.h"

using json = nlohmann::ordered_json;
using sluice::chat::ChatTemplate;
using sluice::chat::normalize_messages;
using sluice::chat::NormalizeOptions;

namespace {

json assistant_call(json content, json arguments) {
  json m = {
      {"role", "assistant"},
      {"tool_calls",
       json::array({{{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", arguments}}}}})}};
  if (!content.is_discarded()) m["content"] = content;
  return m;
}

}  // namespace

TEST_CASE("content null or missing becomes empty text unless the template tests it for none") {
  NormalizeOptions qwen_like;
  const json out =
      normalize_messages(json::array({assistant_call(nullptr, "{}"),
                                      assistant_call(json(json::value_t::discarded), "{}"),
                                      {{"role", "user"}, {"content", nullptr}}}),
                         qwen_like);
  CHECK(out[0]["content"] == "");
  CHECK(out[1]["content"] == "");
  CHECK(out[2]["content"] == "");

  NormalizeOptions deepseek_like;
  deepseek_like.null_content_with_tool_calls = true;
  const json kept = normalize_messages(json::array({assistant_call("", "{}"),
                                                    assistant_call(nullptr, "{}"),
                                                    assistant_call("text", "{}"),
                                                    {{"role", "user"}, {"content", nullptr}}}),
                                       deepseek_like);
  CHECK(kept[0]["content"].is_null());  // "" would make DeepSeek-V3 drop the calls
  CHECK(kept[1]["content"].is_null());
  CHECK(kept[2]["content"] == "text");
  CHECK(kept[3]["content"] == "");  // only turns with tool calls keep null
}

TEST_CASE("content parts are joined text; other part types are refused by index") {
  const json parts =
      json::array({{{"type", "text"}, {"text", "one"}}, {{"type", "input_text"}, {"text", "two"}}});
  const json out = normalize_messages(json::array({{{"role", "user"}, {"content", parts}}}), {});
  CHECK(out[0]["content"] == "one\ntwo");
  const json image = json::array(
      {{{"role", "user"}, {"content", "x"}},
       {{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                 {{"type", "image_url"}, {"image_url", {{"url", "u"}}}}})}}});
  CHECK_THROWS_WITH(normalize_messages(image, {}),
                    "messages[1].content[1]: part type 'image_url' is not supported (this model "
                    "reads text only)");
  CHECK_THROWS_WITH(
      normalize_messages(json::array({{{"role", "user"}, {"content", 5}}}), {}),
      "messages[0].content must be a string, an array of parts or null, found number");
}

TEST_CASE("tool-call arguments become what the template prints") {
  NormalizeOptions as_string;
  as_string.arguments = NormalizeOptions::Arguments::kString;
  const json obj = {{"city", "Paris"}, {"n", 2}, {"deep", {1.5, true}}};
  const json s = normalize_messages(json::array({assistant_call("", obj)}), as_string);
  CHECK(s[0]["tool_calls"][0]["function"]["arguments"] ==
        "{\"city\": \"Paris\", \"n\": 2, \"deep\": [1.5, true]}");
  CHECK(s[0]["tool_calls"][0]["type"] == "function");

  NormalizeOptions as_object;
  as_object.arguments = NormalizeOptions::Arguments::kObject;
  const json o =
      normalize_messages(json::array({assistant_call("", "{\"city\": \"Paris\"}")}), as_object);
  CHECK(o[0]["tool_calls"][0]["function"]["arguments"] == json{{"city", "Paris"}});
  CHECK_THROWS_WITH(
      normalize_messages(json::array({assistant_call("", "{not json")}), as_object),
      doctest::Contains("messages[0].tool_calls[0].function.arguments is not a JSON object"));

  const json given = normalize_messages(json::array({assistant_call("", "{\"a\":1}")}), {});
  CHECK(given[0]["tool_calls"][0]["function"]["arguments"] == "{\"a\":1}");
}

TEST_CASE("developer becomes system; malformed messages are named") {
  CHECK(normalize_messages(json::array({{{"role", "developer"}, {"content", "be brief"}}}),
                           {})[0]["role"] == "system");
  CHECK_THROWS_WITH(normalize_messages(json::object(), {}),
                    "messages must be a JSON array, found object");
  CHECK_THROWS_WITH(normalize_messages(json::array({{{"content", "x"}}}), {}),
                    "messages[0].role must be a string");
  CHECK_THROWS_WITH(
      normalize_messages(
          json::array({{{"role", "assistant"}, {"tool_calls", json::array({{{"id", "x"}}})}}}), {}),
      "messages[0].tool_calls[0].function must be an object");
}

TEST_CASE("options come from how the template reads content and arguments") {
  const ChatTemplate deepseek = ChatTemplate::parse(
      "{% for m in messages %}{% if m['content'] is none %}{{ "
      "m['tool_calls'][0]['function']['arguments'] + '' }}"
      "{% endif %}{% endfor %}",
      "ds");
  const NormalizeOptions ds = sluice::chat::normalize_options_for(deepseek);
  CHECK(ds.null_content_with_tool_calls);
  CHECK(ds.arguments == NormalizeOptions::Arguments::kString);

  const ChatTemplate qwen = ChatTemplate::parse(
      "{% for m in messages %}{% for c in m.tool_calls %}{% if c.function.arguments is string %}{{ "
      "c.function.arguments }}"
      "{% else %}{{ c.function.arguments | tojson }}{% endif %}{% endfor %}{% endfor %}",
      "qwen");
  const NormalizeOptions q = sluice::chat::normalize_options_for(qwen);
  CHECK_FALSE(q.null_content_with_tool_calls);
  CHECK(q.arguments == NormalizeOptions::Arguments::kAsGiven);

  const ChatTemplate object_only = ChatTemplate::parse(
      "{% for m in messages %}{{ m.tool_calls[0].function.arguments | tojson }}{% endfor %}", "k");
  CHECK(sluice::chat::normalize_options_for(object_only).arguments ==
        NormalizeOptions::Arguments::kObject);
}

TEST_CASE("normalised OpenAI messages render where the raw ones raise") {
  // The Qwen3 trap in miniature: `in` on null content is a TypeError.
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}{% if '</think>' in m.content %}T{% endif %}{{ m.content }}{% endfor "
      "%}",
      "q");
  sluice::chat::ChatInput raw;
  raw.messages = json::array({assistant_call(nullptr, "{}")});
  CHECK_THROWS_AS(t.render(raw), sluice::chat::ChatTemplateError);
  sluice::chat::ChatInput fixed = raw;
  fixed.messages = normalize_messages(raw.messages, sluice::chat::normalize_options_for(t));
  CHECK(t.render(fixed).text() == "");
}
