#!/usr/bin/python3
# tests/ctl/bench_mixer_test.py: `sluice bench mixer` on a Kimi-Linear cut of
# real widths (MLA and KDA layers) and an OLMoE cut (GQA): one case per
# softmax-mixer context asked for and one for KDA, each run at least three
# times, and a context past the model's positions refused naming the flag.
import json
import os
import subprocess
import sys
import tempfile
import unittest

SLUICE = os.environ['SLUICE_BIN']


def sluice(*args):
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=240)


class BenchMixerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        cls.models = {}
        for shape in ('kimi-linear-48b', 'olmoe-1b-7b'):
            path = os.path.join(cls.scratch.name, shape + '.sluice')
            made = sluice('synth', shape, path, '--layers', '4', '--experts', '8', '--vocab', '1024', '-q')
            if made.returncode != 0:
                raise RuntimeError(f'sluice synth {shape} failed: {made.stderr}')
            cls.models[shape] = path

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def bench(self, shape, *flags):
        out = sluice('bench', 'mixer', self.models[shape], '--seconds', '0.01', '--threads', '1', '--json', *flags)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_each_mixer_kind_at_each_context(self):
        report = self.bench('kimi-linear-48b', '--context', '3,40', '-n', '2')
        cases = [(c['kind'], c['context']) for c in report['cases']]
        # Kimi-Linear's first layers are KDA; layer 3 is its first MLA layer.
        self.assertEqual(cases, [('mla', 3), ('mla', 40), ('kda', 3)])
        self.assertEqual(report['tokens'], 2)
        self.assertEqual([c['layer'] for c in report['cases']], [3, 3, 0])
        for c in report['cases']:
            self.assertGreaterEqual(c['runs'], 3)
            self.assertGreater(c['median_seconds'], 0.0)
            self.assertLessEqual(c['min_seconds'], c['median_seconds'])

    def test_a_gqa_model_reports_gqa_and_no_kda(self):
        report = self.bench('olmoe-1b-7b', '--context', '5')
        self.assertEqual([(c['kind'], c['context']) for c in report['cases']], [('gqa', 5)])

    def test_a_context_past_the_model_is_refused(self):
        out = sluice('bench', 'mixer', self.models['olmoe-1b-7b'], '--context', '99999999')
        self.assertNotEqual(out.returncode, 0)
        self.assertIn('--context', out.stderr)


if __name__ == '__main__':
    unittest.main(argv=sys.argv[:1], verbosity=2)
