#!/usr/bin/python3
# tests/ctl/install_test.py: `meson install` puts every program a user runs
# (sluice, sluice-io, sluice-router, sluice-up) in one bin/ where they find
# each other, and every usage line of README.md works as written from a fresh
# shell whose PATH holds only that bin/ and the system's.
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..'))
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
PROGRAMS = ('sluice', 'sluice-io', 'sluice-router', 'sluice-up')

# One concrete command (small inputs) per README usage line, found by the
# line's start; run in this order. {m} the container, {ck} its checkpoint,
# {i} an instance name, {w} a scratch folder, {budget} floor + a working set + 1 MiB.
EXAMPLES = [
    ('sluice convert SRC_DIR OUT.sluice', 'sluice convert {ck} {m} --threads 1 --seed 5 --json -q'),
    ('sluice info OUT.sluice', 'sluice info {m} && sluice info {m} --json'),
    ('sluice synth SHAPE OUT.sluice', 'sluice synth qwen3-30b-a3b {w}/synth.sluice --layers 1 --seed 3 --threads 1 '
                                      '--experts 8 --vocab 1024 --json -q && sluice verify {w}/synth.sluice && '
                                      'sluice synth qwen3-30b-a3b {w}/realistic.sluice --layers 1 --seed 3 --threads 1 '
                                      '--experts 8 --vocab 1024 --routing realistic -q && '
                                      'sluice run {w}/realistic.sluice --prompt-ids 1,2,3 -n 2'),
    ('sluice synth SHAPE --print-config', 'sluice synth kimi-linear-48b --print-config --layers 4 > {w}/kimi.json && '
                                          'sluice plan --config {w}/kimi.json'),
    ('sluice verify OUT.sluice', 'sluice verify {m} --json'),
    ('sluice run MODEL.sluice "PROMPT" [', 'sluice run {m} "The river" -n 4 --temp 0.8 --top-k 20 --top-p 0.9 '
                                           '--min-p 0.05 --repeat-penalty 1.1 --seed 3 --ctx 64 --threads 1 '
                                           '--chunk 8 --budget {budget} --verify --trace-out {w}/trace.jsonl '
                                           '--dump-logits {w}/logits.f32 && sluice run {m} --prompt-ids 1,2,3 -n 2 '
                                           '--no-cache --json'),
    ('sluice run MODEL.sluice --session', 'sluice run {m} --session {w}/chat.session "The river" -n 2 --ctx 64 && '
                                          'sluice run {m} --session {w}/chat.session " ran" -n 2 --ctx 64'),
    ('sluice eval MODEL.sluice --text FILE', 'echo "the river ran to the sea" > {w}/text.txt && '
                                            'sluice eval {m} --text {w}/text.txt --json --dump-logits {w}/eval.f32'),
    ('sluice tokenize', 'sluice tokenize {m} "hello there" --json && '
                        'sluice tokenize --tokenizer {ck}/tokenizer.json "hello" --specials'),
    ('sluice detokenize', 'sluice detokenize {m} 1 2 3 && sluice detokenize --tokenizer {ck}/tokenizer.json 1,2,3'),
    ('sluice plan MODEL.sluice', 'sluice plan {m} --ctx 64 --ram 16G --json && sluice plan {m} --budget 1000T --force'),
    ('sluice template MODEL.sluice', 'echo \'[{{"role": "user", "content": "hi"}}]\' > {w}/messages.json && '
                                     'sluice template {m} --messages {w}/messages.json --add-generation-prompt --ids '
                                     '--json && sluice template {m} --messages {w}/messages.json --disable-thinking'),
    ('sluice chat MODEL.sluice', 'echo \'{{"type": "object"}}\' > {w}/schema.json && '
                                 'printf "hello\\n/stats\\n" | sluice chat {m} --system "Be brief." -n 4 --temp 0.8 '
                                 '--seed 3 --ctx 64 --threads 1 --disable-thinking && '
                                 'echo hi | sluice chat {m} -n 4 --json-schema {w}/schema.json && '
                                 'echo hi | sluice chat {m} -n 4 --json-object --enable-thinking'),
    ('sluice serve MODEL.sluice', 'sluice serve {m} --host 127.0.0.1 --port 0 --api-key k --parallel 2 --queue 4 '
                                  '--max-body 1M --model-id tiny --ctx 64 --threads 1 --budget {budget} '
                                  '> {w}/serve.out & pid=$!; for n in $(seq 300); do '
                                  'grep -q listening {w}/serve.out && break; sleep 0.1; done; '
                                  'port=$(grep -o "127.0.0.1:[0-9]*" {w}/serve.out | cut -d: -f2); '
                                  'curl -sf -H "Authorization: Bearer k" -d \'{{"prompt": "hi", "max_tokens": 2}}\' '
                                  'http://127.0.0.1:$port/v1/completions; answered=$?; '
                                  'kill $pid && wait $pid && exit $answered'),
    ('sluice plan --config', 'sluice plan --config {ck}/config.json --ctx 64 --ram 16G --json'),
    ('`sluice plan --threads N', 'sluice plan {m} --threads 2 --chunk 16 --parallel 2 --session --json'),
    ('`sluice plan --images', 'sluice synth k3 --print-config --layers 2 > {w}/k3.json && '
                              'sluice plan --config {w}/k3.json --images --ram 64G'),
    ('`sluice bench replay --geometry', 'sluice bench replay --geometry olmoe --routing synthetic --tokens 64 --json'),
    ('sluice bench kernels', 'sluice bench kernels --json --seconds 0.01 --no-alternatives --threads 1'),
    ('sluice bench io MODEL.sluice', 'sluice bench io {m} --json --seconds 0.1 --rounds 1'),
    ('sluice bench replay TRACE', 'sluice bench replay {w}/trace.jsonl --model {m} --budget {budget} --json'),
    ('sluice bench decode MODEL.sluice', 'sluice bench decode {m} --budget {budget} --compare-lookahead --repeat 1 '
                                         '-n 3 --prompt-tokens 4 --temp 0.8 --seed 3 --json'),
    ('sluice bench batch MODEL.sluice', 'sluice bench batch {m} --budget {budget} --sequences 1,2 -n 2 '
                                        '--prompt-tokens 3 --repeat 1 --json'),
    ('sluice bench mixer MODEL.sluice', 'sluice bench mixer {m} --context 2,6 -n 2 --seconds 0.01 --threads 1 --json'),
    ('sluice-up MODEL.sluice', 'sluice-up {m} --budget {budget} --instance {i}'),
    ('sluice run MODEL.sluice "PROMPT" --attach', 'sluice run {m} "The river" -n 4 --attach {i}'),
    ('sluice stats', 'sluice stats --attach {i} --json && sluice stats --attach {i}'),
    ('sluice-up status', 'sluice-up status --json --instance {i}'),
    ('sluice-up down', 'sluice-up down --instance {i}'),
]


# Usage lines of the README's prose (a line opening with a command in
# backticks that names flags) not run here, and why.
NOT_RUN = {
    '`scripts/make_tiny_checkpoint.py --routing realistic': 'minutes of fitting; scripts_test_realistic_routing runs it',
    '`scripts/bench-vs-llama ': 'a benchmark: builds llama.cpp from a source tree (--llama-src) the suite does not have',
    '`scripts/bench-vs-llama-disk ': 'a benchmark: llama.cpp as above, sysfs readahead and a cgroup, minutes a round',
    '`scripts/bench ': 'a benchmark: writes synth containers of GBs and runs every shape at several budgets',
    '`scripts/fuzz ': 'libFuzzer builds run for minutes; the suite runs each fuzz target briefly (tests/fuzz)',
    '`scripts/code-shape-study ': 'a study of minutes at its defaults; scripts_test_code_shapes runs it on a tiny checkpoint',
}


def readme_usage_lines():
    """Every `sluice ...` or `sluice-up ...` synopsis in a README code block, its
    continuation lines joined, and every prose line opening with a backticked
    command that names a flag (starting with its backtick)."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        text = f.read()
    lines = []
    for block in re.findall(r'^```\n(.*?)^```', text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            if re.match(r'sluice(-up)? ', line):
                lines.append(line.split('  #')[0].rstrip())
            elif line.startswith(' ') and lines and line.strip().startswith('['):
                lines[-1] += ' ' + line.split('  #')[0].strip()
    for line in text.splitlines():
        match = re.match(r'(`(?:sluice|scripts/)[^`]*--[^`]*`)', line)
        if match:
            lines.append(match.group(1))
    return lines


def example_for(line):
    matches = [(prefix, command) for prefix, command in EXAMPLES if line.startswith(prefix)]
    return max(matches, key=lambda match: len(match[0]), default=None)


class InstalledTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-install-')
        destdir = os.path.join(cls.scratch, 'dest')
        done = subprocess.run([os.environ['MESON'], 'install', '-C', os.environ['SLUICE_BUILD_ROOT'], '--no-rebuild',
                               '--quiet', '--destdir', destdir], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        found = [where for where, _, files in os.walk(destdir) if 'sluice-up' in files]
        assert len(found) == 1, found
        cls.bin = found[0]
        cls.home = os.path.join(cls.scratch, 'home')
        os.makedirs(cls.home)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def fresh_shell(self, command):
        """`command` in a new bash with nothing of this environment but a PATH of the installed bin/."""
        env = {'HOME': self.home, 'PATH': self.bin + ':/usr/bin:/bin',
               'XDG_RUNTIME_DIR': os.path.join(self.scratch, 'xdg')}
        return subprocess.run(['/bin/bash', '--norc', '--noprofile', '-c', command], env=env, capture_output=True,
                              text=True, timeout=240, cwd=self.home)

    def test_every_program_is_installed_beside_the_others(self):
        versions = set()
        for program in PROGRAMS:
            with self.subTest(program=program):
                path = os.path.join(self.bin, program)
                self.assertTrue(os.access(path, os.X_OK), path)
                done = self.fresh_shell('%s --version' % program)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertRegex(done.stdout, r'^%s \d+\.\d+\.\d+\n$' % program)
                versions.add(done.stdout.split()[1])
                self.assertEqual(self.fresh_shell('command -v %s' % program).stdout.strip(), path)
        self.assertEqual(len(versions), 1, 'the programs disagree on the version: %s' % versions)

    def test_an_install_with_strip_strips_every_program(self):
        """What scripts/install runs (meson install --strip): no symbol table left in the binaries."""
        destdir = os.path.join(self.scratch, 'stripped')
        done = subprocess.run([os.environ['MESON'], 'install', '-C', os.environ['SLUICE_BUILD_ROOT'], '--no-rebuild',
                               '--quiet', '--strip', '--destdir', destdir], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        found = [where for where, _, files in os.walk(destdir) if 'sluice-up' in files]
        for program in ('sluice', 'sluice-io', 'sluice-router'):
            with self.subTest(program=program):
                sections = subprocess.run(['readelf', '-S', '-W', os.path.join(found[0], program)],
                                          capture_output=True, text=True)
                self.assertEqual(sections.returncode, 0, sections.stderr)
                self.assertNotIn('.symtab', sections.stdout)

    def test_every_readme_usage_line_runs_as_written(self):
        lines = readme_usage_lines()
        self.assertGreater(len(lines), 10)
        used = set()
        for line in lines:
            if any(line.startswith(prefix) for prefix in NOT_RUN):
                continue
            example = example_for(line)
            self.assertIsNotNone(example, 'README line with no example in this test: ' + line)
            used.add(example[0])
            line = line.strip('`')
            # Every flag the README names is one the program's --help names.
            words = line.split()
            command = words[:3] if words[:2] == ['sluice', 'bench'] else words[:2]
            if command[0] == 'sluice-up' and command[1] not in ('status', 'down'):
                command = command[:1]
            helped = self.fresh_shell(' '.join(command) + ' --help')
            self.assertEqual(helped.returncode, 0, (line, helped.stderr))
            for flag in re.findall(r'(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b', line):
                self.assertIn(flag, helped.stdout, '%s: README names %s, --help does not' % (line, flag))
        self.assertEqual(used, {prefix for prefix, _ in EXAMPLES}, 'examples for lines the README no longer has')

        checkpoint = os.path.join(self.scratch, 'checkpoint')
        made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe',
                               checkpoint], capture_output=True, text=True)
        self.assertEqual(made.returncode, 0, 'make_tiny_checkpoint.py failed: ' + made.stderr)
        model = os.path.join(self.scratch, 'tiny.sluice')
        names = {'m': model, 'ck': checkpoint, 'i': 'readme-%d' % os.getpid(), 'w': self.scratch, 'budget': ''}
        try:
            for prefix, command in EXAMPLES:
                if prefix == 'sluice info OUT.sluice':
                    plan = json.loads(self.fresh_shell('sluice plan %s --json' % model).stdout)
                    # A working set above run's floor, and 1 MiB for what the benchmarks hold
                    # besides (bench decode's chunk-wide mailboxes, bench batch's second sequence).
                    names['budget'] = str(plan['floor_bytes'] + plan['working_set_bytes'] + (1 << 20))
                concrete = command.format(**names)
                with self.subTest(line=prefix):
                    done = self.fresh_shell(concrete)
                    self.assertEqual(done.returncode, 0, '%s\n%s%s' % (concrete, done.stdout, done.stderr))
        finally:
            self.fresh_shell('sluice-up down --instance %s' % names['i'])


if __name__ == '__main__':
    unittest.main()
