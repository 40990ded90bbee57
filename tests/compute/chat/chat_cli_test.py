#!/usr/bin/python3
# tests/compute/chat/chat_cli_test.py: `sluice chat` driven over stdin on a
# tiny random Qwen3-MoE container (ChatML template). Expected token counts
# come from `sluice template --ids`, never from the chat itself: the second
# turn prefills only the new tokens, /reset, /save + /load (with the state),
# a greedy reply equal to `sluice run --prompt-ids`, and --json-schema output
# that parses.
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ['SLUICE_BIN']
STATUS = re.compile(r'^\[prompt (\d+) tokens: (\d+) reused, (\d+) prefilled; (\d+) tokens at [0-9.]+ tok/s; '
                    r'finish (\w+)(; json (\w+))?\]$', re.M)
IM_END = 2  # the tiny Qwen3 tokenizer's <|im_end|> (scripts/sluicepy/bpe.py)


class ChatCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix='sluice-chat-test-')
        checkpoint = os.path.join(cls.tmp.name, 'ckpt')
        cls.model = os.path.join(cls.tmp.name, 'tiny.sluice')
        made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'qwen3_moe',
                               checkpoint], capture_output=True, text=True)
        # A fixture that cannot be built is a failure, never a skip.
        assert made.returncode == 0, 'make_tiny_checkpoint.py failed: ' + made.stderr
        subprocess.run([SLUICE, 'convert', checkpoint, cls.model, '-q'], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def chat(self, lines, *flags, status=0, tokens=8):
        done = subprocess.run([SLUICE, 'chat', self.model, '-n', str(tokens), *flags],
                              input=''.join(line + '\n' for line in lines).encode(), capture_output=True)
        self.assertEqual(done.returncode, status, done.stderr.decode(errors='replace'))
        stderr = done.stderr.decode(errors='replace')
        turns = [dict(prompt=int(m[0]), reused=int(m[1]), prefilled=int(m[2]), generated=int(m[3]), finish=m[4],
                      json=m[6]) for m in STATUS.findall(stderr)]
        return done.stdout, stderr, turns

    def template_ids(self, messages, generation_prompt=True):
        path = self.path('messages-%d.json' % len(messages))
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(messages, f, ensure_ascii=False)
        args = [SLUICE, 'template', self.model, '--messages', path, '--ids']
        if generation_prompt:
            args.append('--add-generation-prompt')
        done = subprocess.run(args, capture_output=True, text=True, check=True)
        return [int(t) for t in done.stdout.split()]

    def saved(self, name):
        with open(self.path(name), encoding='utf-8') as f:
            return json.load(f)

    def test_second_turn_prefills_only_the_new_tokens(self):
        _, _, turns = self.chat(['hello there', 'how are you', '/save ' + self.path('two.json')])
        self.assertEqual(len(turns), 2)
        messages = self.saved('two.json')
        self.assertEqual([m['role'] for m in messages], ['user', 'assistant', 'user', 'assistant'])
        first = self.template_ids(messages[:1])
        self.assertEqual(turns[0]['prompt'], len(first))
        self.assertEqual(turns[0]['reused'], 0)
        # The new tokens: from the <|im_end|> that closes the first reply to
        # the end of the second prompt, as `sluice template` tokenizes them.
        second = self.template_ids(messages[:3])
        close = second.index(IM_END, len(first))
        new = len(second) - close
        # The engine never runs the last generated token; when the reply hit
        # the length cap that token is content, else it is <|im_end|> itself.
        pending = 1 if turns[0]['finish'] == 'length' else 0
        self.assertEqual(turns[1]['prefilled'], new + pending)
        self.assertEqual(turns[1]['reused'], turns[0]['prompt'] + turns[0]['generated'] - 1)
        self.assertEqual(turns[1]['reused'] + turns[1]['prefilled'], turns[1]['prompt'])

    def test_greedy_reply_equals_sluice_run_on_the_rendered_prompt(self):
        out, _, turns = self.chat(['Tell me a story'])
        ids = self.template_ids([{'role': 'user', 'content': 'Tell me a story'}])
        run = subprocess.run([SLUICE, 'run', self.model, '--prompt-ids', ','.join(map(str, ids)), '-n', '8'],
                             capture_output=True, check=True)
        self.assertEqual(len(turns), 1)
        self.assertEqual(out, run.stdout)

    def test_reset_starts_over_and_keeps_the_system_message(self):
        _, _, turns = self.chat(['first question', 'second', '/reset', 'first question',
                                 '/save ' + self.path('reset.json')], '--system', 'Be brief.')
        messages = self.saved('reset.json')
        self.assertEqual([m['role'] for m in messages], ['system', 'user', 'assistant'])
        self.assertEqual(messages[1]['content'], 'first question')
        expected = self.template_ids([{'role': 'system', 'content': 'Be brief.'},
                                      {'role': 'user', 'content': 'first question'}])
        self.assertEqual(turns[0]['prompt'], len(expected))
        self.assertEqual(turns[2]['prompt'], len(expected))

    def test_save_then_load_continues_the_conversation_and_its_state(self):
        _, _, first = self.chat(['hello there', 'and more', '/save ' + self.path('a.json')])
        a = self.saved('a.json')
        self.assertTrue(os.path.exists(self.path('a.json.session')))
        _, stderr, turns = self.chat(['/load ' + self.path('a.json'), '/save ' + self.path('b.json'), 'next one',
                                      '/save ' + self.path('c.json')])
        self.assertIn('the state from %s.session' % self.path('a.json'), stderr)
        self.assertEqual(self.saved('b.json'), a)
        c = self.saved('c.json')
        self.assertEqual(c[:4], a)
        self.assertEqual(c[4], {'role': 'user', 'content': 'next one'})
        # The restored state holds the whole first run, its last reply's last
        # token included: only the template's new tokens are prefilled.
        prompt = self.template_ids(c[:5])
        close = prompt.index(IM_END, len(self.template_ids(c[:3])))
        self.assertEqual(turns[0]['reused'], first[1]['prompt'] + first[1]['generated'])
        self.assertEqual(turns[0]['prefilled'], len(prompt) - close)
        self.assertEqual(turns[0]['reused'] + turns[0]['prefilled'], turns[0]['prompt'])

    def test_load_without_a_state_prefills_the_whole_conversation(self):
        self.chat(['hello there', 'and more', '/save ' + self.path('d.json')])
        os.remove(self.path('d.json.session'))
        _, _, turns = self.chat(['/load ' + self.path('d.json'), 'next one', '/save ' + self.path('e.json')])
        self.assertEqual(turns[0]['prompt'], len(self.template_ids(self.saved('e.json')[:5])))
        self.assertEqual(turns[0]['reused'], 0)

    def test_a_damaged_state_is_refused_naming_the_file(self):
        self.chat(['hello there', '/save ' + self.path('f.json')])
        with open(self.path('f.json.session'), 'r+b') as f:
            f.truncate(30)
        _, stderr, turns = self.chat(['/load ' + self.path('f.json'), 'next one'], status=1)
        self.assertIn('/load: ' + self.path('f.json.session'), stderr)
        self.assertEqual(turns[0]['reused'], 0)

    def test_bad_commands_name_what_is_wrong_and_the_chat_goes_on(self):
        missing = self.path('no-such.json')
        _, stderr, turns = self.chat(['/load ' + missing, '/frobnicate', 'still here'], status=1)
        self.assertIn('/load: %s: cannot open the file' % missing, stderr)
        self.assertIn('/frobnicate: unknown command', stderr)
        self.assertEqual(len(turns), 1)

    def test_json_schema_replies_parse_and_validate_or_end_by_length(self):
        schema = {'type': 'object', 'properties': {'name': {'type': 'string', 'maxLength': 8},
                                                   'n': {'type': 'integer', 'minimum': 0, 'maximum': 99},
                                                   'ok': {'type': 'boolean'}},
                  'required': ['name', 'n']}
        path = self.path('schema.json')
        with open(path, 'w') as f:
            json.dump(schema, f)
        valid = 0
        for seed in range(1, 5):
            for temp in ('0', '0.8', '1.5'):
                out, _, turns = self.chat(['give me json'], '--json-schema', path, '--seed', str(seed), '--temp', temp,
                                          tokens=60)
                self.assertEqual(len(turns), 1)
                if turns[0]['finish'] == 'length':
                    self.assertEqual(turns[0]['json'], 'incomplete')
                    continue
                self.assertEqual(turns[0]['json'], 'valid')
                value = json.loads(out.decode())
                self.assertEqual(set(value) - {'name', 'n', 'ok'}, set())
                self.assertIsInstance(value['name'], str)
                self.assertLessEqual(len(value['name']), 8)
                self.assertTrue(isinstance(value['n'], int) and 0 <= value['n'] <= 99)
                valid += 1
        self.assertGreater(valid, 0)

    def test_a_schema_the_subset_cannot_enforce_is_refused(self):
        path = self.path('bad-schema.json')
        with open(path, 'w') as f:
            json.dump({'type': 'string', 'pattern': '^a+$'}, f)
        done = subprocess.run([SLUICE, 'chat', self.model, '--json-schema', path], input='', capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stderr.strip(),
                         'sluice: error: --json-schema %s: json schema at /: the keyword "pattern" is not '
                         'supported' % path)


if __name__ == '__main__':
    unittest.main(verbosity=2)
