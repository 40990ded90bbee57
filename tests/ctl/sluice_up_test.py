#!/usr/bin/python3
# tests/ctl/sluice_up_test.py: the supervisor as a user drives it: up returns
# with the group running, status shows it, a sluice-io killed with SIGKILL is
# restarted, down stops everything and leaves no socket, segment or state file.
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..'))
SLUICE_UP = os.path.join(ROOT, 'scripts', 'sluice-up')
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()[0] != 'Z'


def make_container(scratch):
    checkpoint = os.path.join(scratch, 'checkpoint')
    container = os.path.join(scratch, 'tiny.sluice')
    made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print('SKIP: make_tiny_checkpoint.py failed: ' + made.stderr)
        sys.exit(77)
    converted = subprocess.run([os.environ['SLUICE_BIN'], 'convert', checkpoint, container],
                               capture_output=True, text=True)
    if converted.returncode != 0:
        print('SKIP: `sluice convert` cannot make the tiny container yet: ' + converted.stderr)
        sys.exit(77)
    return container


class SluiceUpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix='sluice-ctl-up-')
        cls.container = make_container(cls.scratch)
        cls.env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(cls.scratch, 'xdg'))
        cls.instance = 'ctlup-%d' % os.getpid()

    @classmethod
    def tearDownClass(cls):
        subprocess.run([PYTHON, SLUICE_UP, 'down', '--instance', cls.instance], env=cls.env, capture_output=True)
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def sluice_up(self, *args, timeout=120):
        return subprocess.run([PYTHON, SLUICE_UP, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def status(self):
        done = self.sluice_up('status', '--json', '--instance', self.instance)
        return json.loads(done.stdout)

    def test_up_status_restart_down(self):
        up = self.sluice_up(self.container, '--instance', self.instance, '--readers', '2')
        self.assertEqual(up.returncode, 0, up.stderr)
        self.assertIn('up', up.stdout)
        state_dir = os.path.join(self.env['XDG_RUNTIME_DIR'], 'sluice')
        state_file = os.path.join(state_dir, self.instance + '.group.json')
        self.assertTrue(os.path.exists(state_file))

        status = self.status()
        self.assertTrue(status['up'])
        self.assertTrue(status['answering'])
        self.assertEqual(status['members'][0]['name'], 'sluice-io')
        self.assertTrue(status['members'][0]['alive'])
        supervisor = status['supervisor_pid']
        first = status['members'][0]['pid']
        sock = status['socket']
        segment = '/dev/shm/' + status['segment']
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o600)
        self.assertTrue(os.path.exists(segment))

        # `sluice stats --attach NAME` finds an instance's socket the way sluice-up placed it.
        by_name = subprocess.run([os.environ['SLUICE_BIN'], 'stats', '--attach', self.instance, '--json'],
                                 env=self.env, capture_output=True, text=True)
        self.assertEqual(by_name.returncode, 0, by_name.stderr)
        self.assertEqual(json.loads(by_name.stdout)['instance'], self.instance)

        again = self.sluice_up(self.container, '--instance', self.instance)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn('already up', again.stderr)

        os.kill(first, signal.SIGKILL)
        deadline = time.time() + 60
        while time.time() < deadline:
            status = self.status()
            member = status['members'][0]
            if member['pid'] != first and member['alive'] and status['answering']:
                break
            time.sleep(0.2)
        self.assertNotEqual(member['pid'], first, 'sluice-io was not restarted')
        self.assertEqual(member['restarts'], 1)
        self.assertTrue(status['answering'])
        second = member['pid']

        down = self.sluice_up('down', '--instance', self.instance)
        self.assertEqual(down.returncode, 0, down.stderr)
        self.assertFalse(alive(supervisor))
        self.assertFalse(alive(second))
        self.assertFalse(os.path.exists(sock))
        self.assertFalse(os.path.exists(segment))
        self.assertFalse(os.path.exists(state_file))
        gone = self.sluice_up('status', '--instance', self.instance)
        self.assertEqual(gone.returncode, 3)

    def test_bad_model_is_refused(self):
        done = self.sluice_up(os.path.join(self.scratch, 'missing.sluice'), '--instance', self.instance + 'x')
        self.assertNotEqual(done.returncode, 0)
        self.assertIn('missing.sluice', done.stderr)


if __name__ == '__main__':
    unittest.main()
