#!/usr/bin/python3
# tests/ctl/cli_test.py: the command line as a new user meets it: argument
# errors are one line with status 2, a path that is not a container says what
# it is, seeds, stdin prompts, the end of the context, Ctrl-C, convert without
# a tokenizer, --version and --help of every program and subcommand, progress
# on a terminal, and `sluice stats` that fits 80 columns and ends cleanly.
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..'))
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ['SLUICE_BIN']
SLUICE_IO = os.environ['SLUICE_IO_BIN']
SLUICE_ROUTER = os.environ['SLUICE_ROUTER_BIN']

# Options each subcommand's --help must name (written from the README and the
# design, not read from the program). Subcommands not listed need only a
# working --help with an Options section.
HELP_OPTIONS = {
    'run': ['MODEL', 'PROMPT', '--max-tokens', '--temp', '--top-k', '--top-p', '--min-p', '--repeat-penalty',
            '--seed', '--ctx', '--threads', '--chunk', '--budget', '--force', '--attach', '--no-cache', '--verify',
            '--json', '--dump-logits', '--prompt-ids', '--trace-out', '--lookahead', '--session', '--read-timeout',
            '--image', '--ignore-eos'],
    'eval': ['MODEL', '--text', '--json', '--dump-logits', '--ctx', '--budget'],
    'convert': ['SRC_DIR', 'OUT', '--threads', '--seed', '--json', '--quiet', '--force', '--no-tokenizer'],
    'info': ['MODEL', '--json'],
    'verify': ['MODEL', '--json'],
    'tokenize': ['--tokenizer', '--json', '--specials'],
    'detokenize': ['--tokenizer', '--skip-special'],
    'plan': ['MODEL', '--ctx', '--budget', '--force', '--json', '--config', '--ram', '--images', '--threads', '--chunk',
             '--parallel', '--session'],
    'synth': ['SHAPE', 'OUT', '--layers', '--experts', '--vocab', '--seed', '--threads', '--routing', '--force',
              '--json', '--quiet', '--print-config'],
    'template': ['MODEL', '--messages', '--tools', '--add-generation-prompt', '--enable-thinking',
                 '--disable-thinking', '--ids', '--json'],
    'serve': ['MODEL', '--host', '--port', '--api-key', '--parallel', '--queue', '--max-body', '--model-id', '--ctx',
              '--threads', '--attach', '--budget', '--lookahead'],
    'stats': ['--attach', '--watch', '--json'],
    'chat': ['MODEL', '--system', '--attach', '--max-tokens', '--temp', '--seed', '--json-schema', '--json-object',
             '--ctx', '--budget'],
    'bench': ['kernels', 'io', 'replay', 'decode', 'batch'],
    'bench kernels': ['--json', '--threads', '--seconds'],
    'bench io': ['MODEL', '--json', '--readers'],
    'bench replay': ['TRACE', '--model', '--budget', '--json', '--geometry', '--routing', '--tokens', '--guess-layers'],
    'bench decode': ['MODEL', '--budget', '--compare-lookahead', '--repeat', '--temp', '--seed', '--json', '--threads',
                     '--routing', '--prompt-tokens', '--lookahead'],
    'bench batch': ['MODEL', '--budget', '--sequences', '--tokens', '--prompt-tokens', '--repeat', '--threads',
                    '--json', '--lookahead', '--compare-lookahead'],
}


def sluice(*args, **kwargs):
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=kwargs.pop('timeout', 120),
                          **kwargs)


def wait_until(condition, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError('timed out waiting until ' + what)


def on_a_terminal(argv):
    """Runs argv with stderr on a pseudo-terminal; (status, what the terminal showed)."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    shown = b''
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            child.kill()
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the follower side closed: the child is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return child.wait(), shown.decode(errors='replace')


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-cli-')
        cls.checkpoint = os.path.join(cls.scratch, 'checkpoint')
        cls.model = os.path.join(cls.scratch, 'tiny.sluice')
        made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe',
                               cls.checkpoint], capture_output=True, text=True)
        # A fixture that cannot be built is a failure, never a skip.
        assert made.returncode == 0, 'make_tiny_checkpoint.py failed: ' + made.stderr
        converted = sluice('convert', cls.checkpoint, cls.model, '-q')
        assert converted.returncode == 0, '`sluice convert` failed: ' + converted.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def assert_usage_error(self, done, needle):
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
        self.assertRegex(done.stderr, r'^sluice: error: ')
        self.assertIn(needle, done.stderr)

    def run_json(self, *args, **kwargs):
        done = sluice('run', self.model, *args, '--json', **kwargs)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_argument_errors_are_one_line_with_status_2(self):
        m = self.model
        for args, needle in ((['run'], 'MODEL is required'),
                             (['run', m, 'hi', '--ctx', '0'], '--ctx'),
                             (['run', m, 'hi', '--threads', '0'], '--threads'),
                             (['run', m, 'hi', '--budget', ''], '--budget'),
                             (['run', m, 'hi', '--no-such-flag'], '--no-such-flag'),
                             (['plan', m, '--ctx', '0'], '--ctx'),
                             (['plan', m, '--budget', '3Q'], "bad size '3Q'"),
                             (['run', m, 'hi', '--prompt-ids', '1,2'], 'PROMPT or --prompt-ids'),
                             (['run', m, '--prompt-ids', '1,x'], "--prompt-ids: '1,x' is not a list of token ids"),
                             (['detokenize', m, '1', 'x'], '"x" is not a token id'),
                             (['stats', '--watch', '0'], '--watch'),
                             (['stats', '--watch', '-1'], '--watch'),
                             (['bench'], 'subcommand'),
                             (['run', m, 'hi', '--image'], '--image'),
                             (['synth', 'no-such-shape', os.path.join(self.scratch, 'x.sluice')], 'no-such-shape'),
                             (['synth', 'olmoe-1b-7b', '--print-config', '--routing', 'bogus'], '--routing'),
                             (['serve', m, '--parallel', '0'], '--parallel'),
                             (['serve', m, '--api-key'], '--api-key'),
                             (['serve', m, '--port', '70000'], '--port'),
                             (['plan', m, '--threads', '0'], '--threads'),
                             (['plan', m, '--parallel', '0'], '--parallel'),
                             (['bench', 'decode', m, '--budget', '1G', '--routing'], '--routing'),
                             (['bench', 'replay', '--geometry', 'bogus'], '--geometry'),
                             (['bench', 'batch', m, '--budget', '1G', '--sequences', '0'], '--sequences'),
                             (['template', m], '--messages'),
                             (['run', m, 'hi', '--temp', '-1'], '--temp'),
                             (['run', m, 'hi', '--temp', 'nan'], '--temp'),
                             (['run', m, 'hi', '--top-p', '2'], '--top-p'),
                             (['run', m, 'hi', '--top-k', '-1'], '--top-k'),
                             (['run', m, 'hi', '--min-p', '1'], '--min-p'),
                             (['chat', m, '--repeat-penalty', '0'], '--repeat-penalty')):
            with self.subTest(args=args):
                self.assert_usage_error(sluice(*args), needle)

    def test_a_path_that_is_not_a_container_says_what_it_is(self):
        empty = os.path.join(self.scratch, 'empty')
        os.makedirs(empty, exist_ok=True)
        plain = os.path.join(self.scratch, 'plain.txt')
        with open(plain, 'w') as f:
            f.write('not a model\n')
        for path, needle in ((self.checkpoint, 'a Hugging Face checkpoint, not a sluice container: convert it '
                                               'with `sluice convert'),
                             (empty, 'no manifest.json'),
                             (plain, 'not a directory')):
            for command in (['run', path, 'hi'], ['info', path], ['verify', path], ['plan', path]):
                with self.subTest(command=command):
                    done = sluice(*command)
                    self.assertEqual(done.returncode, 1, done.stderr)
                    self.assertTrue(done.stderr.startswith('sluice: error: %s: ' % path), done.stderr)
                    self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                    self.assertIn(needle, done.stderr)

    def test_seeds_are_drawn_and_printed_or_taken_as_given(self):
        drawn = [self.run_json('hi', '-n', '4', '--temp', '1')['seed'] for _ in range(2)]
        self.assertNotEqual(drawn[0], drawn[1])
        minus_one = self.run_json('hi', '-n', '4', '--temp', '1', '--seed', '-1')['seed']
        self.assertNotIn(minus_one, (2 ** 64 - 1, -1))
        given = self.run_json('hi', '-n', '6', '--temp', '1', '--seed', '7')
        self.assertEqual(given['seed'], 7)
        # A printed seed repeats its run.
        again = self.run_json('hi', '-n', '6', '--temp', '1', '--seed', str(drawn[0]))
        first = self.run_json('hi', '-n', '6', '--temp', '1', '--seed', str(drawn[0]))
        self.assertEqual(again['tokens'], first['tokens'])
        text = sluice('run', self.model, 'hi', '-n', '2')
        self.assertRegex(text.stderr, r'seed \d+')

    def test_stdin_prompt_drops_one_trailing_newline(self):
        from_argument = self.run_json('hello there', '-n', '3')
        from_stdin = self.run_json('-', '-n', '3', input='hello there\n')
        self.assertEqual(from_stdin['prompt_tokens'], from_argument['prompt_tokens'])
        self.assertEqual(from_stdin['tokens'], from_argument['tokens'])
        two = self.run_json('-', '-n', '3', input='hello there\n\n')
        self.assertGreater(two['prompt_tokens'], from_argument['prompt_tokens'])

    def test_detokenize_takes_the_id_forms_its_help_names(self):
        forms = [['1,2,3'], ['1', '2', '3'], ['[1, 2, 3]'], ['1 2 3']]
        outputs = set()
        for form in forms:
            done = sluice('detokenize', self.model, *form)
            self.assertEqual(done.returncode, 0, (form, done.stderr))
            outputs.add(done.stdout)
        self.assertEqual(len(outputs), 1, outputs)
        self.assertIn('space', sluice('detokenize', '--help').stdout)

    def test_generation_that_fills_the_context_ends_with_length(self):
        prompt = self.run_json('hello there', '-n', '1')['prompt_tokens']
        full = self.run_json('hello there', '-n', '100', '--ctx', str(prompt + 3), '--ignore-eos')
        self.assertEqual(full['finish_reason'], 'length')
        self.assertTrue(full['context_full'])
        # The prompt fills `prompt` positions; each token but the last is run through the model.
        self.assertEqual(full['generated_tokens'], 4)
        text = sluice('run', self.model, 'hello there', '-n', '100', '--ctx', str(prompt + 3), '--ignore-eos')
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn('finish length (the context of %d is full)' % (prompt + 3), text.stderr)
        self.assertTrue(text.stdout.endswith('\n'))
        short = self.run_json('hello there', '-n', '2', '--ignore-eos')
        self.assertEqual(short['finish_reason'], 'length')
        self.assertFalse(short['context_full'])

    def test_a_prompt_longer_than_the_context_is_refused_naming_both_lengths(self):
        trace = os.path.join(self.scratch, 'refused.jsonl')
        done = sluice('run', self.model, 'one two three four five six', '--ctx', '3', '--trace-out', trace)
        self.assert_usage_error(done, 'longer than the context of 3')
        prompt = int(re.search(r'the prompt is (\d+) tokens', done.stderr).group(1))
        self.assertGreater(prompt, 3)
        self.assertRegex(done.stderr, r"the model's maximum is \d+")
        self.assertFalse(os.path.exists(trace) and os.path.getsize(trace) > 0, 'tokens were generated')

    def test_ctrl_c_ends_run_with_its_summary(self):
        child = subprocess.Popen([SLUICE, 'run', self.model, 'hi', '-n', '100000000', '--ignore-eos', '--ctx', '256',
                                  '--no-cache'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # The tiny model's context is long enough to still be decoding when the signal lands.
        os.set_blocking(child.stdout.fileno(), False)
        seen = b''

        def some_text():
            nonlocal seen
            seen += child.stdout.read() or b''
            return len(seen) > 0
        wait_until(some_text, 'run printed text')
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        seen += out
        self.assertEqual(child.returncode, 0, err)
        self.assertTrue(seen.endswith(b'\n'))
        self.assertIn(b'finish cancelled (interrupted)', err)

    def test_convert_refuses_a_checkpoint_without_a_tokenizer(self):
        bare = os.path.join(self.scratch, 'bare')
        shutil.copytree(self.checkpoint, bare)
        os.remove(os.path.join(bare, 'tokenizer.json'))
        out = os.path.join(self.scratch, 'bare.sluice')
        done = sluice('convert', bare, out, '-q')
        self.assertEqual(done.returncode, 1)
        self.assertIn('no tokenizer.json', done.stderr)
        self.assertIn('--no-tokenizer', done.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, 'manifest.json')))

    def test_every_program_has_version(self):
        for program, name in ((SLUICE, 'sluice'), (SLUICE_IO, 'sluice-io'), (SLUICE_ROUTER, 'sluice-router')):
            done = subprocess.run([program, '--version'], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertRegex(done.stdout, r'^%s \d+\.\d+\.\d+\n$' % name)
        for program, name, args, needle in (
                (SLUICE_IO, 'sluice-io', [self.model, '--no-such-flag'], '--no-such-flag'),
                (SLUICE_IO, 'sluice-io', [self.model, '--budget', '3Q'], '--budget'),
                (SLUICE_IO, 'sluice-io', [self.model, '--readers', '0'], '--readers'),
                (SLUICE_IO, 'sluice-io', [self.model, '--instance', 'bad/name'], 'bad/name'),
                (SLUICE_ROUTER, 'sluice-router', [self.model, '--no-such-flag'], '--no-such-flag'),
                (SLUICE_ROUTER, 'sluice-router', ['--attach'], '--attach'),
                (SLUICE_ROUTER, 'sluice-router', ['--attach', 'x', '--model', self.model, '--lookahead', 'x'],
                 '--lookahead')):
            with self.subTest(program=name, args=args):
                done = subprocess.run([program, *args], capture_output=True, text=True)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertRegex(done.stderr, r'^%s: error: [^\n]*\n$' % name)
                self.assertIn(needle, done.stderr)

    def test_every_subcommand_help_runs_and_names_its_options(self):
        def subcommands(prefix):
            listing = sluice(*prefix, '--help').stdout
            section = listing.split('Subcommands:')[1] if 'Subcommands:' in listing else ''
            return [line.split()[0] for line in section.splitlines() if line.startswith('  ') and line.strip()]
        found = []
        for name in subcommands([]):
            found.append(name)
            found += ['%s %s' % (name, sub) for sub in subcommands([name])]
        for expected in HELP_OPTIONS:
            self.assertIn(expected, found)
        for command in found:
            with self.subTest(command=command):
                done = sluice(*command.split(), '--help')
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn('Usage: ', done.stdout)
                self.assertIn(command.split()[-1], done.stdout.splitlines()[1] + done.stdout.splitlines()[0])
                self.assertIn('Options:', done.stdout)
                for option in HELP_OPTIONS.get(command, []):
                    self.assertIn(option, done.stdout)
        self.assertNotIn('more to come', sluice('--help').stdout)

    def test_convert_help_names_every_family(self):
        shown = sluice('convert', '--help').stdout
        for family in ('olmoe', 'qwen3_moe', 'mixtral', 'deepseek_v3', 'kimi_k2', 'kimi_linear', 'kimi_k3'):
            self.assertIn(family, shown)

    def test_progress_on_a_terminal_only(self):
        long_prompt = ' '.join(['river'] * 40)
        status, shown = on_a_terminal([SLUICE, 'run', self.model, long_prompt, '-n', '1', '--chunk', '2'])
        self.assertEqual(status, 0, shown)
        self.assertRegex(shown, r'prefill: \d+/\d+ tokens')
        piped = sluice('run', self.model, long_prompt, '-n', '1', '--chunk', '2')
        self.assertNotIn('prefill:', piped.stderr)
        status, shown = on_a_terminal([SLUICE, 'verify', self.model])
        self.assertEqual(status, 0, shown)
        self.assertRegex(shown, r'verify: \d+/\d+ records')
        self.assertNotIn('verify:', sluice('verify', self.model).stderr)
        kernels = ['bench', 'kernels', '--seconds', '0.01', '--no-alternatives', '--threads', '1']
        status, shown = on_a_terminal([SLUICE, *kernels])
        self.assertEqual(status, 0, shown)
        self.assertRegex(shown, r'bench kernels: \d+ cases timed')
        self.assertNotIn('bench kernels:', sluice(*kernels).stderr)

    def test_a_budget_above_the_usable_memory_is_refused_with_the_plan(self):
        done = sluice('run', self.model, 'hi', '--budget', '1000T')
        self.assertEqual(done.returncode, 1)
        self.assertIn('above the usable memory', done.stderr)
        self.assertIn('floor', done.stderr)
        self.assertNotIn('mmap', done.stderr)


class StatsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-cli-stats-')
        checkpoint = os.path.join(cls.scratch, 'checkpoint')
        cls.model = os.path.join(cls.scratch, 'tiny.sluice')
        # Twelve MoE layers: the per-layer list needs two lines.
        subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint,
                        '--set', 'num_hidden_layers=12'], check=True, capture_output=True)
        subprocess.run([SLUICE, 'convert', checkpoint, cls.model, '-q'], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def setUp(self):
        self.socket = os.path.join(self.scratch, 'io.sock')
        self.daemon = subprocess.Popen([SLUICE_IO, self.model, '--socket', self.socket, '--instance',
                                        'clistats-%d' % os.getpid(), '--readers', '1'],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: sluice('stats', '--attach', self.socket).returncode == 0, 'sluice-io answers')

    def tearDown(self):
        if self.daemon.poll() is None:
            self.daemon.terminate()
        self.daemon.wait()

    def test_the_text_fits_80_columns(self):
        # A client's traffic fills the per-layer lists (12 layers).
        self.assertEqual(sluice('run', self.model, 'hello', '-n', '4', '--attach', self.socket).returncode, 0)
        done = sluice('stats', '--attach', self.socket)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn('L11', done.stdout)
        for line in done.stdout.splitlines():
            self.assertLessEqual(len(line), 80, line)

    def test_watch_ends_with_one_line_when_the_daemon_goes_away(self):
        log = os.path.join(self.scratch, 'watch.out')
        with open(log, 'w') as out:
            watcher = subprocess.Popen([SLUICE, 'stats', '--attach', self.socket, '--watch', '0.1'], stdout=out,
                                       stderr=subprocess.PIPE, text=True)
        wait_until(lambda: os.path.getsize(log) > 0, 'the watch printed a snapshot')
        self.daemon.terminate()
        self.daemon.wait()
        _, err = watcher.communicate(timeout=60)
        self.assertEqual(watcher.returncode, 1)
        self.assertEqual(err, 'sluice: sluice-io at %s went away; stopped watching\n' % self.socket)


if __name__ == '__main__':
    unittest.main()
