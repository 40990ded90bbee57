#!/usr/bin/python3
# tests/fuzz/sanitizer_canary_test.py: in a -Db_sanitize build, a deliberate
# fault under each sanitizer ends fuzz_loop with a non-zero exit and the
# sanitizer's report, so a finding of the fuzz runs fails scripts/check.
#   sanitizer_canary_test.py FUZZ_LOOP SANITIZERS   (e.g. address,undefined)
import subprocess
import sys
import unittest

FUZZ_LOOP = sys.argv[1]
SANITIZERS = sys.argv[2].split(',')
REPORTS = {'address': 'AddressSanitizer: heap-buffer-overflow',
           'undefined': 'runtime error: signed integer overflow'}


class SanitizerCanaryTest(unittest.TestCase):
    def test_a_report_fails_the_run(self):
        checked = [kind for kind in SANITIZERS if kind in REPORTS]
        self.assertTrue(checked, 'no canary for the sanitizers %s' % SANITIZERS)
        for kind in checked:
            with self.subTest(sanitizer=kind):
                done = subprocess.run([FUZZ_LOOP, '--canary', kind], capture_output=True, text=True)
                self.assertNotEqual(done.returncode, 0, done.stderr)
                self.assertIn(REPORTS[kind], done.stderr)


if __name__ == '__main__':
    unittest.main(argv=sys.argv[:1])
