#!/usr/bin/python3
# tests/compute/capi/capi_test.py: libsluice against `sluice run` on tiny
# containers of every family: the C driver's greedy tokens equal run's,
# embedded, and attached to a sluice-io for a GQA and a KDA family;
# scripts/examples/sluice_ctypes.py prints what run prints; the library
# exports exactly the functions sluice.h declares, under its ABI's soname.
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from checked_run import run

ROOT = os.environ['SLUICE_SOURCE_ROOT']
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ['SLUICE_BIN']
SLUICE_IO = os.environ['SLUICE_IO_BIN']
CAPI_TEST = os.environ['CAPI_TEST']
LIBSLUICE = os.environ['LIBSLUICE']
PROMPT = 'The river ran'
TOKENS = 8
FAMILIES = ('olmoe', 'qwen3_moe', 'mixtral', 'deepseek_v3', 'kimi_k2', 'kimi_linear', 'kimi_k3')


def run_tokens(model, *flags):
    """`sluice run`'s greedy tokens of PROMPT, as the C driver opens the model (one thread, chunks of 4)."""
    done = run([SLUICE, 'run', model, PROMPT, '-n', str(TOKENS), '--temp', '0', '--threads', '1', '--chunk', '4',
                '--json', *flags])
    return json.loads(done.stdout)['tokens']


def driver_tokens(model, scratch, *attach):
    done = run([CAPI_TEST, model, PROMPT, str(TOKENS), scratch, *attach])
    lines = done.stdout.decode().splitlines()
    assert lines[-1] == 'ok', lines
    return [int(t) for t in next(l for l in lines if l.startswith('tokens:')).split()[1:]]


class CapiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-capi-')
        cls.models = {}
        for family in FAMILIES:
            checkpoint = os.path.join(cls.scratch, family + '-checkpoint')
            run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), family, checkpoint, '--seed', '3'])
            cls.models[family] = os.path.join(cls.scratch, family + '.sluice')
            run([SLUICE, 'convert', checkpoint, cls.models[family], '-q'])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def test_the_c_driver_generates_what_sluice_run_does_in_every_family(self):
        for family, model in self.models.items():
            with self.subTest(family=family):
                expected = run_tokens(model)
                self.assertEqual(len(expected), TOKENS)
                self.assertEqual(driver_tokens(model, self.scratch), expected)

    def test_attached_to_a_daemon_the_driver_still_matches(self):
        for family in ('olmoe', 'kimi_linear'):
            model = self.models[family]
            with self.subTest(family=family):
                socket = os.path.join(self.scratch, family + '.sock')
                log = open(os.path.join(self.scratch, family + '-io.log'), 'wb')
                daemon = subprocess.Popen([SLUICE_IO, model, '--socket', socket, '--instance',
                                           'capi-%d-%s' % (os.getpid(), family), '--readers', '2'],
                                          stdout=log, stderr=log)
                try:
                    deadline = time.monotonic() + 60
                    while not os.path.exists(socket):
                        self.assertIsNone(daemon.poll(), 'sluice-io exited: see ' + log.name)
                        self.assertLess(time.monotonic(), deadline, 'sluice-io made no socket')
                        time.sleep(0.05)
                    expected = run_tokens(model)
                    self.assertEqual(run_tokens(model, '--attach', socket), expected)
                    self.assertEqual(driver_tokens(model, self.scratch, socket), expected)
                finally:
                    daemon.send_signal(signal.SIGTERM)
                    self.assertEqual(daemon.wait(timeout=30), 0)
                    log.close()

    def test_the_ctypes_example_prints_what_sluice_run_prints(self):
        model = self.models['olmoe']
        for flags in (['-n', '16'], ['-n', '6', '--temp', '0.9', '--seed', '11']):
            with self.subTest(flags=flags):
                expected = run([SLUICE, 'run', model, PROMPT, *flags]).stdout
                example = run([PYTHON, os.path.join(ROOT, 'scripts', 'examples', 'sluice_ctypes.py'), model, PROMPT,
                               '--lib', LIBSLUICE, *flags]).stdout
                self.assertGreater(len(expected.strip()), 0)
                self.assertEqual(example, expected)

    def test_a_wrong_container_is_an_error_naming_it(self):
        example = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'examples', 'sluice_ctypes.py'),
                                  os.path.join(self.scratch, 'absent.sluice'), PROMPT, '--lib', LIBSLUICE],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(example.returncode, 1)
        self.assertIn('absent.sluice', example.stderr)

    def test_the_library_exports_exactly_the_header_functions(self):
        with open(os.path.join(ROOT, 'compute', 'capi', 'sluice.h')) as f:
            declared = set(re.findall(r'\b(sluice_[a-z_]+)\(', f.read()))
        self.assertIn('sluice_generate', declared)
        symbols = run(['nm', '-D', '--defined-only', LIBSLUICE]).stdout.decode().split('\n')
        exported = {line.split()[-1] for line in symbols if line.strip()}
        self.assertEqual(exported, declared)
        dynamic = run(['readelf', '-d', LIBSLUICE]).stdout.decode()
        self.assertIn('Library soname: [libsluice.so.0]', dynamic)


if __name__ == '__main__':
    unittest.main()
