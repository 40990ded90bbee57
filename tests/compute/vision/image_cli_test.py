#!/usr/bin/python3
# tests/compute/vision/image_cli_test.py: --image in `sluice chat` and
# `sluice eval` on K3-tiny. Chat: --image attaches to the first user message,
# /image to the next; the saved state holds the prompt with the media block
# and the image's positions (ids built here by hand from `sluice template` and
# `sluice tokenize`), then exactly the greedy tokens of `sluice run --image`
# on those ids; the image's run in the session file carries the SHA-256 of its
# size and pixels, computed here; later turns reuse the state and the tower
# encodes each image once (/stats), also after /load in a new process; the
# saved conversation holds the image as a data: URL of the file's bytes.
# Refusals name the file or the model. `run --session` records the image's
# place after the resumed tokens. Eval: every token of the text after
# the images' blocks is scored, and the last row equals `sluice run`'s on the
# same ids.
import base64
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.environ['SLUICE_SOURCE_ROOT']
SLUICE = os.environ['SLUICE_BIN']
PYTHON = '/usr/bin/python3'
VOCAB = 512
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_files  # noqa: E402

STATUS = re.compile(r'\[prompt (\d+) tokens: (\d+) reused, (\d+) prefilled; (\d+) tokens at')
TOWER = re.compile(r'vision tower runs (\d+)')
TEXT = 'What is in this picture?'


def session_file(path):
    """(tokens, [(first, length, digest)]) of a version 2 session file."""
    with open(path, 'rb') as f:
        data = f.read()
    assert data[:8] == b'SLUICESQ', path
    version, = struct.unpack_from('<I', data, 8)
    position, runs = struct.unpack_from('<II', data, 24)
    assert version == 2, version
    tokens = list(struct.unpack_from(f'<{position}i', data, 48))
    at = 48 + 4 * position
    media = []
    for i in range(runs):
        first, length = struct.unpack_from('<II', data, at + 40 * i)
        media.append((first, length, data[at + 40 * i + 8:at + 40 * i + 40]))
    return tokens, media


class ImageCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix='sluice-image-cli-')
        work = cls.tmp.name
        checkpoint = os.path.join(work, 'k3')
        cls.model = os.path.join(work, 'k3.sluice')
        subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'kimi_k3', checkpoint],
                       check=True, capture_output=True)
        subprocess.run([SLUICE, 'convert', checkpoint, cls.model, '-q'], check=True, capture_output=True)
        with open(os.path.join(checkpoint, 'tokenizer.json'), encoding='utf-8') as f:
            cls.special = {t['content']: t['id'] for t in json.load(f)['added_tokens']}
        cls.rgb_a = image_files.picture(90, 60, seed=3)  # a 6×4 patch grid: 6 positions
        cls.image_a = os.path.join(work, 'a.png')
        image_files.write_png(cls.image_a, cls.rgb_a)
        cls.image_b = os.path.join(work, 'b.tga')  # 20×20: a 2×2 grid, 1 position
        image_files.write_tga(cls.image_b, image_files.picture(20, 20, seed=4))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def encode(self, text):
        done = subprocess.run([SLUICE, 'tokenize', self.model, text, '--json'], capture_output=True, text=True,
                              check=True)
        return json.loads(done.stdout)['ids']

    def block(self, width, height):
        s = self.special
        return ([s['<|media_begin|>']] + self.encode(f'image {width}x{height}') +
                [s['<|media_content|>'], s['<|media_pad|>'], s['<|media_end|>']])

    def chat(self, lines, *flags, model=None):
        return subprocess.run([SLUICE, 'chat', model or self.model, '--temp', '0', '-n', '3', '--threads', '1',
                               '--disable-thinking', *flags], input='\n'.join(lines) + '\n',
                              capture_output=True, text=True, timeout=120)

    def test_chat_keeps_encoded_images_across_turns_save_and_load(self):
        conversation = self.path('conv.json')
        first = self.path('first.json')
        done = self.chat([TEXT, f'/save {first}', 'And now?', '/stats', f'/image {self.image_b}', 'Compare them.',
                          '/stats', f'/save {conversation}'], '--image', self.image_a)
        self.assertEqual(done.returncode, 0, done.stderr)
        turns = [tuple(map(int, m)) for m in STATUS.findall(done.stderr)]
        self.assertEqual(len(turns), 3, done.stderr)
        self.assertEqual(turns[0][1], 0)
        for prompt, reused, prefilled, _ in turns[1:]:
            self.assertGreaterEqual(reused, turns[0][0], 'a later turn reuses the first prompt, image and all')
            self.assertEqual(reused + prefilled, prompt)
        self.assertEqual([int(n) for n in TOWER.findall(done.stderr)], [1, 2],
                         'the first image is encoded once over two turns, the second once more')

        # The first turn's state: the prompt as built by hand, then run's greedy tokens.
        messages = self.path('text-only.json')
        with open(messages, 'w', encoding='utf-8') as f:
            json.dump([{'role': 'user', 'content': TEXT}], f)
        text_only = json.loads(subprocess.run(
            [SLUICE, 'template', self.model, '--messages', messages, '--ids', '--json', '--add-generation-prompt',
             '--disable-thinking'], capture_output=True, text=True, check=True).stdout)['ids']
        body = text_only.index(self.special['<|sep|>']) + 1
        ids = text_only[:body] + self.block(90, 60) + text_only[body:]
        ran = json.loads(subprocess.run(
            [SLUICE, 'run', self.model, '--prompt-ids', ','.join(map(str, ids)), '--image', self.image_a, '-n', '3',
             '--temp', '0', '--json', '--threads', '1'], capture_output=True, text=True, check=True).stdout)
        pad = self.special['<|media_pad|>']
        first_pad = ids.index(pad)
        expanded = ids[:first_pad] + [pad] * 6 + ids[first_pad + 1:]
        self.assertEqual(turns[0][0], len(expanded))
        tokens, media = session_file(first + '.session')
        reply = ran['tokens']
        if reply and reply[-1] == self.special['<|end_of_msg|>']:
            reply = reply[:-1]  # a stop token is not part of the reply the state holds
        self.assertEqual(tokens[:len(expanded)], expanded)
        self.assertEqual(tokens[len(expanded):], reply, 'chat generates from the image as run does')
        digest = hashlib.sha256(struct.pack('<II', 90, 60) + self.rgb_a.tobytes()).digest()
        self.assertEqual(media, [(first_pad, 6, digest)])

        with open(conversation, encoding='utf-8') as f:
            saved = json.load(f)
        url = saved[0]['content'][0]['image_url']['url']
        self.assertTrue(url.startswith('data:image/png;base64,'))
        with open(self.image_a, 'rb') as f:
            self.assertEqual(base64.b64decode(url.split(',', 1)[1]), f.read())
        self.assertEqual(saved[0]['content'][1], {'type': 'text', 'text': TEXT})
        self.assertEqual(saved[4]['content'][0]['type'], 'image_url')
        self.assertEqual(saved[4]['content'][1]['text'], 'Compare them.')
        _, media = session_file(conversation + '.session')
        self.assertEqual([(m[0], m[1]) for m in media], [(first_pad, 6), (media[1][0], 1)])

        # A new process: /load restores the state with its images; nothing is encoded again.
        done = self.chat([f'/load {conversation}', 'Once more.', '/stats'])
        self.assertEqual(done.returncode, 0, done.stderr)
        (prompt, reused, prefilled, _), = [tuple(map(int, m)) for m in STATUS.findall(done.stderr)]
        saved_tokens, _ = session_file(conversation + '.session')
        self.assertEqual(reused, len(saved_tokens))
        self.assertEqual(TOWER.findall(done.stderr), ['0'])

    def test_chat_refuses_bad_images_by_name(self):
        not_image = self.path('notes.txt')
        with open(not_image, 'w') as f:
            f.write('not a picture')
        missing = self.path('missing.png')
        done = self.chat([f'/image {missing}', f'/image {not_image}', 'hello', '/stats'])
        self.assertEqual(done.returncode, 1, 'a failed command fails a non-interactive chat')
        errors = [line for line in done.stderr.splitlines() if line.startswith('sluice: error:')]
        self.assertEqual(len(errors), 2, done.stderr)
        self.assertIn(f'/image: {missing}: cannot open the image', errors[0])
        self.assertIn(f'/image: {not_image}: not an image', errors[1])
        self.assertEqual(TOWER.findall(done.stderr), ['0'], 'the turn after the refusals has no image')

        checkpoint, olmoe = self.path('olmoe'), self.path('olmoe.sluice')
        subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint],
                       check=True, capture_output=True)
        subprocess.run([SLUICE, 'convert', checkpoint, olmoe, '-q'], check=True, capture_output=True)
        done = self.chat(['hello'], '--image', self.image_a, model=olmoe)
        self.assertEqual(done.returncode, 1)
        message = done.stderr.strip()
        self.assertEqual(len(message.splitlines()), 1, message)
        self.assertIn(olmoe, message)
        self.assertIn('no vision tower', message)

    def test_run_session_records_where_its_images_sit(self):
        session = self.path('run.session')
        pad = self.special['<|media_pad|>']
        for ids in ('5,7', f'5,{pad},6'):  # the image comes in the second, resumed run
            subprocess.run([SLUICE, 'run', self.model, '--prompt-ids', ids, '-n', '1', '--temp', '0', '--session',
                            session, '--threads', '1'] + (['--image', self.image_a] if str(pad) in ids else []),
                           capture_output=True, text=True, check=True)
        tokens, media = session_file(session)
        digest = hashlib.sha256(struct.pack('<II', 90, 60) + self.rgb_a.tobytes()).digest()
        # 2 prompt tokens and 1 generated in the first run, then 5 and the pad's positions.
        self.assertEqual(media, [(4, 6, digest)])
        self.assertEqual(tokens[4:10], [pad] * 6)

    def test_eval_scores_the_text_after_the_images(self):
        text_file = self.path('text.txt')
        text = 'The quick brown fox jumps over the lazy dog.'
        with open(text_file, 'w') as f:
            f.write(text)
        text_ids = self.encode(text)
        dump = self.path('eval.f32')
        with_image = json.loads(subprocess.run(
            [SLUICE, 'eval', self.model, '--text', text_file, '--image', self.image_a, '--json', '--dump-logits',
             dump, '--threads', '1'], capture_output=True, text=True, check=True).stdout)
        block = self.block(90, 60)
        self.assertEqual(with_image['tokens'], len(block) - 1 + 6 + len(text_ids))
        # Every text token is a target, the first too: it follows the images.
        self.assertEqual(with_image['scored'], len(text_ids))
        rows = np.fromfile(dump, dtype='<f4').reshape(-1, VOCAB)
        self.assertEqual(rows.shape[0], with_image['tokens'])

        ran_dump = self.path('run.f32')
        subprocess.run([SLUICE, 'run', self.model, '--prompt-ids', ','.join(map(str, block + text_ids)), '--image',
                        self.image_a, '-n', '1', '--temp', '0', '--dump-logits', ran_dump, '--threads', '1'],
                       capture_output=True, text=True, check=True)
        after_prompt = np.fromfile(ran_dump, dtype='<f4').reshape(-1, VOCAB)[0]
        self.assertLess(float(np.max(np.abs(after_prompt - rows[-1]))), 1e-5)

        without = json.loads(subprocess.run([SLUICE, 'eval', self.model, '--text', text_file, '--json',
                                             '--threads', '1'], capture_output=True, text=True, check=True).stdout)
        self.assertEqual(without['scored'], len(text_ids) - 1)
        self.assertNotAlmostEqual(without['mean_nll'], with_image['mean_nll'], places=6)


if __name__ == '__main__':
    unittest.main()
