"""Random templates against Debian's python3-jinja2: templates generated
from the subset the interpreter implements (text, output, if/elif/else, for
with loop variables, set, filters, tests, operators, subscripts and
whitespace control), each rendered over random conversations by
chat_render_cases and by jinja2 set up as Hugging Face sets it up. Where both
render, the texts must be identical, and a template's raise_exception in
jinja2 must fail the render in sluice. JINJA_RANDOM_TEMPLATES sets how many."""
import os
import random
import sys
import unittest
import warnings

import jinja2

from test_jinja_reference import conversation, hf_environment, hf_render, run_harness

TEMPLATES = int(os.environ.get("JINJA_RANDOM_TEMPLATES", "100"))
CASES = 6
# jinja2 compiles `1[0]` to Python that warns; the render still fails, as compared.
warnings.filterwarnings("ignore", category=SyntaxWarning)
NAMES = ["m", "x", "item", "acc"]


class Generator:
    def __init__(self, rng):
        self.rng = rng
        self.scope = ["messages", "bos_token", "add_generation_prompt"]

    def literal(self):
        r = self.rng
        return r.choice(["1", "0", "-3", "2.5", "'a'", "\"b c\"", "''", "true", "false", "none", "[1, 2, 3]",
                         "['x', 'y']", "{'k': 1, 'j': 'v'}", "'Mixed Case  '"])

    def atom(self, depth):
        r = self.rng
        kind = r.randrange(9)
        if kind < 2 or depth > 2:
            return self.literal()
        if kind == 2:
            return r.choice(self.scope)
        if kind == 3:
            return f"messages[{r.choice(['0', '-1', '1'])}]['{r.choice(['role', 'content'])}']"
        if kind == 4:
            return f"{self.atom(depth + 1)}.{r.choice(['role', 'content', 'upper()', 'strip()', 'lower()'])}"
        if kind == 5:
            return f"({self.expr(depth + 1)})"
        if kind == 6:
            return f"{self.atom(depth + 1)}[{r.choice(['0', '1:', ':2', '-1', '::-1'])}]"
        if kind == 7:
            return f"(range({r.randint(0, 4)}) | list)"
        return f"{self.atom(depth + 1)} | {self.filter()}"

    def filter(self):
        # Filters that give an iterator end in list: jinja2 would print its repr, with an address.
        # Left out, as known differences: tuples (sluice prints them as lists) and
        # map(attribute=) over non-mappings (an Undefined in a list prints empty).
        return self.rng.choice(["upper", "lower", "length", "trim", "tojson", "string", "first", "last", "list",
                                "reverse | list", "join(', ')", "default('d')", "int", "title", "capitalize",
                                "replace('a', 'A')", "sort", "unique | list", "items | list",
                                "selectattr('role', 'equalto', 'user') | list",
                                "safe", "sum", "abs", "round"])

    def expr(self, depth=0):
        r = self.rng
        kind = r.randrange(8)
        if kind < 3 or depth > 2:
            return self.atom(depth)
        if kind == 3:
            op = r.choice(["+", "-", "*", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in", "//", "%"])
            return f"{self.atom(depth + 1)} {op} {self.atom(depth + 1)}"
        if kind == 4:
            return f"not {self.atom(depth + 1)}"
        if kind == 5:
            test = r.choice(["defined", "none", "string", "mapping", "iterable", "number", "true", "false",
                             "sequence", "odd", "even"])
            return f"{self.atom(depth + 1)} is {r.choice(['', 'not '])}{test}"
        if kind == 6:
            return f"{self.atom(depth + 1)} if {self.atom(depth + 1)} else {self.atom(depth + 1)}"
        return f"{self.atom(depth + 1)} | {self.filter()}"

    def block(self, depth=0):
        r = self.rng
        parts = []
        for _ in range(r.randint(1, 4)):
            kind = r.randrange(7 if depth < 3 else 2)
            dash = lambda: r.choice(["", "", "-"])
            if kind == 0:
                parts.append(r.choice(["text ", "\n", "  indented\n", "<|im_start|>", "é ", "{", "}"]))
            elif kind == 1:
                parts.append("{{" + dash() + " " + self.expr() + " " + dash() + "}}")
            elif kind == 2:
                body = self.block(depth + 1)
                orelse = ("{%" + dash() + " else " + dash() + "%}" + self.block(depth + 1)) if r.random() < 0.5 else ""
                elif_ = ("{% elif " + self.expr() + " %}" + self.block(depth + 1)) if r.random() < 0.3 else ""
                parts.append("{%" + dash() + " if " + self.expr() + " " + dash() + "%}" + body + elif_ + orelse +
                             "{%" + dash() + " endif " + dash() + "%}")
            elif kind == 3:
                name = r.choice(NAMES)
                self.scope.append(name)
                self.scope += ["loop.index", "loop.first", "loop.last", "loop.length", "loop.index0"]
                body = self.block(depth + 1)
                del self.scope[-6:]
                iterable = r.choice(["messages", "range(3)", "'abc'", "[1, 'b', none]", self.atom(2)])
                parts.append("{% for " + name + " in " + iterable + " %}" + body + "{% endfor %}")
            elif kind == 4:
                name = r.choice(NAMES)
                parts.append("{% set " + name + " = " + self.expr() + " %}")
                self.scope.append(name)
            elif kind == 5:
                parts.append("{# comment #}")
            else:
                parts.append("{{ raise_exception('stop') }}" if r.random() < 0.1 else "{{ messages | length }}")
        return "".join(parts)


class JinjaRandomTest(unittest.TestCase):
    def test_random_templates_render_as_jinja2_renders_them(self):
        rng = random.Random(44)
        env = hf_environment()
        tmp = os.path.join(os.environ.get("MESON_BUILD_ROOT", "/tmp"), "chat_random_templates")
        os.makedirs(tmp, exist_ok=True)
        cases, sources = [], []
        for t in range(TEMPLATES):
            source = Generator(rng).block()
            path = os.path.join(tmp, f"random-{t}.jinja")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            sources.append(source)
            for _ in range(CASES):
                messages, tools = conversation(rng, openai_shape=False)
                cases.append({"template": path, "messages": messages, "tools": tools, "source": t,
                              "add_generation_prompt": rng.random() < 0.5, "special_tokens": {"bos_token": "<s>"}})
        results = run_harness(cases)
        self.assertEqual(len(results), len(cases))
        # Where jinja2 refuses and sluice renders (sluice's parser and operators
        # are more lenient in places), there is no output to compare.
        compared = refused_by_both = lenient = 0
        failures = []
        compiled = {}
        for case, got in zip(cases, results):
            source = sources[case["source"]]
            try:
                if case["source"] not in compiled:
                    compiled[case["source"]] = env.from_string(source)
                expected = hf_render(compiled[case["source"]], case)
            except (jinja2.exceptions.TemplateError, TypeError, ValueError, AttributeError, KeyError, IndexError,
                    ZeroDivisionError, OverflowError) as e:
                if type(e) is jinja2.exceptions.TemplateError and got["ok"]:  # raise_exception
                    failures.append(f"the template raised {e} in jinja2 but sluice rendered\n  {source}")
                refused_by_both += not got["ok"]
                lenient += got["ok"]
                continue
            if not got["ok"]:
                continue  # sluice is stricter here than jinja2; not compared
            compared += 1
            if got["text"] != expected:
                failures.append(f"renders differ: sluice {got['text']!r}, jinja2 {expected!r}\n  {source}")
        print(f"{compared} renders compared, {refused_by_both} refused by both, {lenient} refused by jinja2 alone, "
              f"of {len(cases)}", file=sys.stderr)
        self.assertFalse(failures, "\n".join(failures[:15]))
        self.assertGreater(compared, len(cases) // 4, "too few renders compared to prove anything")


if __name__ == "__main__":
    unittest.main()
