"""Constrained decoding against an oracle independent of ours: random JSON
schemas in the subset json_constraint.h supports, random walks through each
schema's values by our recogniser (schema_walks), and every completed output
validated by Debian's python3-jsonschema. A schema of the subset that the
compiler refuses is a failure too. SCHEMA_ORACLE_SCHEMAS sets how many
schemas (default 500, four walks each)."""
import importlib.metadata
import json
import os
import random
import subprocess
import sys
import unittest

import jsonschema

HARNESS = os.environ["SCHEMA_WALKS"]
SCHEMAS = int(os.environ.get("SCHEMA_ORACLE_SCHEMAS", "500"))
WALKS = 4
WORDS = ["a", "b", "name", "x1", "ключ", "日本", "é", "with space", "q\"uote", "back\\slash"]


def scalar_schema(rng):
    kind = rng.randrange(9)
    if kind == 0:
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.5:
            s["maxLength"] = s.get("minLength", 0) + rng.randint(0, 6)
        return s
    if kind == 1:
        s = {"type": "integer"}
        if rng.random() < 0.5:
            s["minimum"] = rng.randint(-50, 50)
        if rng.random() < 0.5:
            s["maximum"] = s.get("minimum", -50) + rng.randint(0, 200)
        return s
    if kind == 2:
        return {"type": "number"}
    if kind == 3:
        return {"type": "boolean"}
    if kind == 4:
        return {"type": "null"}
    if kind == 5:
        values = rng.sample([1, -2, 3.5, "x", "y", "日本", True, False, None, "a b"], rng.randint(1, 4))
        return {"enum": values}
    if kind == 6:
        return {"const": rng.choice([0, "k", True, None, 12, "é"])}
    if kind == 7:
        # Alternatives must begin with different bytes: integer or number, not both.
        return {"type": rng.sample(["string", rng.choice(["integer", "number"]), "boolean", "null"], rng.randint(1, 3))}
    return {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]}


def schema(rng, depth=0):
    if depth >= 3 or rng.random() < 0.4:
        s = scalar_schema(rng)
    elif rng.random() < 0.55:
        names = rng.sample(WORDS, rng.randint(0, 4))
        s = {"type": "object", "properties": {n: schema(rng, depth + 1) for n in names}}
        if names and rng.random() < 0.7:
            s["required"] = rng.sample(names, rng.randint(1, len(names)))
        r = rng.random()
        if r < 0.3:
            s["additionalProperties"] = False
        elif r < 0.4:
            s["additionalProperties"] = True
    elif rng.random() < 0.8:
        s = {"type": "array", "items": schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
    else:
        s = {"type": "array", "prefixItems": [schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
        s["minItems"] = len(s["prefixItems"])
        s["items"] = False
    if rng.random() < 0.1:
        s["description"] = "ignored"
    if rng.random() < 0.05:
        s = {"allOf": [s]}
    return s


def with_defs(rng, root):
    """Moves a subschema under $defs and refers to it, now and then."""
    if rng.random() < 0.8 or root.get("type") != "object" or not root.get("properties"):
        return root
    name = next(iter(root["properties"]))
    defs = {"d0": root["properties"][name]}
    root["properties"][name] = {"$ref": "#/$defs/d0"}
    root["$defs"] = defs
    return root


class SchemaOracleTest(unittest.TestCase):
    def test_every_completed_output_is_valid_by_jsonschema(self):
        rng = random.Random(44)
        cases = [{"schema": with_defs(rng, schema(rng)), "seed": i, "walks": WALKS} for i in range(SCHEMAS)]
        done = subprocess.run([HARNESS], input="".join(json.dumps(c) + "\n" for c in cases),
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr)
        results = [json.loads(line) for line in done.stdout.split("\n") if line]
        self.assertEqual(len(results), len(cases))
        checked = 0
        failures = []
        for case, result in zip(cases, results):
            if "refused" in result:
                failures.append(f"refused a schema of the subset: {result['refused']}\n  {json.dumps(case['schema'])}")
                continue
            validator = jsonschema.Draft202012Validator(case["schema"])
            for text in result["outputs"]:
                checked += 1
                try:
                    value = json.loads(text)
                except ValueError as e:
                    failures.append(f"not JSON ({e}): {text!r}\n  {json.dumps(case['schema'])}")
                    continue
                errors = [e.message for e in validator.iter_errors(value)]
                if errors:
                    failures.append(f"{text!r} is invalid: {errors[0]}\n  {json.dumps(case['schema'])}")
        print(f"{checked} schema/output pairs validated by jsonschema {importlib.metadata.version('jsonschema')}")
        self.assertFalse(failures, "\n".join(failures[:20]))
        # Walks must mostly finish: an oracle that checked nothing proves nothing.
        self.assertGreater(checked, SCHEMAS)


if __name__ == "__main__":
    unittest.main()
