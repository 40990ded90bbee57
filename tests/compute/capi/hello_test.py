#!/usr/bin/python3
# tests/compute/capi/hello_test.py: `meson install` puts libsluice, sluice.h
# and sluice.pc where a program outside the repository finds them: hello.c
# built with `cc -std=c99 hello.c $(pkg-config --cflags --libs sluice)`
# against the installed prefix runs without LD_LIBRARY_PATH and prints
# exactly what `sluice run MODEL PROMPT -n 16 --temp 0` prints.
import os
import shutil
import subprocess
import tempfile
import unittest

from checked_run import run

ROOT = os.environ['SLUICE_SOURCE_ROOT']
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ['SLUICE_BIN']


class HelloTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-hello-')
        destdir = os.path.join(cls.scratch, 'dest')
        run([os.environ['MESON'], 'install', '-C', os.environ['SLUICE_BUILD_ROOT'], '--no-rebuild', '--quiet',
             '--destdir', destdir])
        found = [where for where, _, files in os.walk(destdir) if 'sluice.pc' in files]
        assert len(found) == 1, found
        cls.pkgconfig = found[0]
        checkpoint = os.path.join(cls.scratch, 'checkpoint')
        run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint])
        cls.model = os.path.join(cls.scratch, 'tiny.sluice')
        run([SLUICE, 'convert', checkpoint, cls.model, '-q'])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def pkg_config(self, *flags):
        # sluice.pc finds the prefix from its own place: here the scratch DESTDIR.
        env = dict(os.environ, PKG_CONFIG_PATH=self.pkgconfig)
        return run(['pkg-config', *flags, 'sluice'], env=env).stdout.decode().split()

    def test_the_header_library_and_pc_file_are_installed(self):
        includedir = self.pkg_config('--variable=includedir')[0]
        libdir = self.pkg_config('--variable=libdir')[0]
        self.assertTrue(includedir.startswith(self.scratch), includedir)
        self.assertTrue(os.path.isfile(os.path.join(includedir, 'sluice.h')))
        self.assertTrue(os.path.islink(os.path.join(libdir, 'libsluice.so')))
        self.assertTrue(os.path.isfile(os.path.join(libdir, 'libsluice.so.0')))

    def test_hello_prints_what_sluice_run_prints(self):
        hello = os.path.join(self.scratch, 'hello')
        source = os.path.join(ROOT, 'scripts', 'examples', 'hello.c')
        run(['cc', '-std=c99', '-Wall', '-Werror', source, *self.pkg_config('--cflags', '--libs'), '-o', hello])
        env = {k: v for k, v in os.environ.items() if k != 'LD_LIBRARY_PATH'}
        for prompt in ('The river ran', 'Once'):
            with self.subTest(prompt=prompt):
                expected = run([SLUICE, 'run', self.model, prompt, '-n', '16', '--temp', '0']).stdout
                self.assertGreater(len(expected.strip()), 0)
                self.assertEqual(run([hello, self.model, prompt], env=env).stdout, expected)
        usage = subprocess.run([hello], capture_output=True, text=True)
        self.assertEqual(usage.returncode, 2)
        missing = subprocess.run([hello, os.path.join(self.scratch, 'absent.sluice'), 'x'], capture_output=True,
                                 text=True, env=env)
        self.assertEqual(missing.returncode, 1)
        self.assertIn('absent.sluice', missing.stderr)


if __name__ == '__main__':
    unittest.main()
