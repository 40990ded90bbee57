# tests/ctl/broken_fixture_test.py: a converter or checkpoint generator broken on
# purpose, in a scratch copy, makes the tests that need the tiny container FAIL
# (not skip), and scripts/test_totals then reports failures, as scripts/check does.
# argv[1:]: C++ test programs that use tests/ctl/tiny_container.
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ['SLUICE_SOURCE_ROOT']
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ['SLUICE_BIN']
FIXTURE_PROGRAMS = sys.argv[1:]
PYTHON_TESTS = [[os.path.join(ROOT, 'tests', 'ctl', 'cli_test.py'), 'CliTest'],
                [os.path.join(ROOT, 'tests', 'ctl', 'sluice_up_test.py')]]
SKIP = 77


class BrokenFixtureTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix='sluice-broken-fixture-')
        self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

    def run_all(self, env):
        """Runs every fixture test under `env`; returns [(name, exit status, output)]."""
        runs = []
        for argv in [[p] for p in FIXTURE_PROGRAMS] + [[PYTHON, *t] for t in PYTHON_TESTS]:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
            runs.append((os.path.basename(argv[0] if len(argv) == 1 else argv[1]), done.returncode,
                         done.stdout + done.stderr))
        return runs

    def assert_all_fail(self, runs, reason):
        for name, status, output in runs:
            self.assertNotIn(status, (0, SKIP), '%s exited %d with a broken fixture:\n%s' % (name, status, output))
            self.assertIn(reason, output, name)
        # What meson makes of those statuses (exitcode protocol), counted as scripts/check counts.
        log = os.path.join(self.scratch, 'testlog.json')
        with open(log, 'w') as f:
            for name, status, output in runs:
                result = 'OK' if status == 0 else 'SKIP' if status == SKIP else 'FAIL'
                f.write(json.dumps({'name': name, 'result': result, 'stdout': output}) + '\n')
        totals = subprocess.run([os.path.join(ROOT, 'scripts', 'test_totals'), '0', log],
                                capture_output=True, text=True)
        self.assertEqual(totals.returncode, 1, totals.stdout)
        self.assertEqual(totals.stdout.splitlines()[-1], '0 passed, %d failed' % len(runs))

    def test_a_failing_converter_fails_every_test_that_needs_the_container(self):
        # `sluice` as it is, except that `convert` fails.
        wrapper = os.path.join(self.scratch, 'sluice')
        with open(wrapper, 'w') as f:
            f.write('#!/bin/sh\nif [ "$1" = convert ]; then echo "convert broken on purpose" >&2; exit 1; fi\n'
                    'exec %s "$@"\n' % SLUICE)
        os.chmod(wrapper, 0o755)
        self.assert_all_fail(self.run_all(dict(os.environ, SLUICE_BIN=wrapper)), 'convert broken on purpose')

    def test_a_failing_checkpoint_generator_fails_every_test_that_needs_the_container(self):
        # A scratch copy of the source tree's scripts/ whose make_tiny_checkpoint.py fails.
        root = os.path.join(self.scratch, 'root')
        shutil.copytree(os.path.join(ROOT, 'scripts'), os.path.join(root, 'scripts'))
        with open(os.path.join(root, 'scripts', 'make_tiny_checkpoint.py'), 'w') as f:
            f.write('import sys\nsys.exit("make_tiny_checkpoint broken on purpose")\n')
        self.assert_all_fail(self.run_all(dict(os.environ, SLUICE_SOURCE_ROOT=root)),
                             'make_tiny_checkpoint broken on purpose')


class TotalsTest(unittest.TestCase):
    def totals(self, entries, ci):
        with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
            for entry in entries:
                f.write(json.dumps(entry) + '\n')
        self.addCleanup(os.remove, f.name)
        env = dict(os.environ, CI='true') if ci else {k: v for k, v in os.environ.items() if k != 'CI'}
        return subprocess.run([os.path.join(ROOT, 'scripts', 'test_totals'), '0', f.name], env=env,
                              capture_output=True, text=True)

    ENTRIES = [{'name': 'ok', 'result': 'OK', 'stdout': ''},
               {'name': 'no_avx512', 'result': 'SKIP', 'stdout': 'x\nCAPABILITY-SKIP: avx512: this CPU lacks it\n'},
               {'name': 'no_node_modules', 'result': 'SKIP', 'stdout': 'SKIP: tests/npm/node_modules is missing\n'}]

    def test_under_ci_only_a_capability_skip_is_a_skip(self):
        done = self.totals(self.ENTRIES, ci=True)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn('no_node_modules skipped without naming a missing capability', done.stdout)
        self.assertNotIn('no_avx512 skipped without', done.stdout)
        self.assertEqual(done.stdout.splitlines()[-1], '1 passed, 1 failed, 1 skipped')

    def test_outside_ci_a_skip_is_counted_as_one(self):
        done = self.totals(self.ENTRIES, ci=False)
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(done.stdout.splitlines()[-1], '1 passed, 0 failed, 2 skipped')

    def test_a_log_cut_short_is_a_failure(self):
        done = self.totals([{'name': 'ok', 'result': 'OK'}, 'not a result'], ci=False)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual(done.stdout.splitlines()[-1], '1 passed, 1 failed')


if __name__ == '__main__':
    unittest.main(argv=sys.argv[:1])
