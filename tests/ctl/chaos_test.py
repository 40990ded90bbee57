#!/usr/bin/python3
# tests/ctl/chaos_test.py: the chaos probe of issue 16 as a test. Under the
# supervisor, at the floor's budget (one working set of cache), each
# member (sluice-io, sluice-router) is killed with SIGKILL or stopped with
# SIGSTOP while a client generates: the client's output and logits must be
# those of an undisturbed run, the supervisor must replace the member, and
# after `down` no process, segment, socket or partial output may remain.
# The fault's position is drawn from a printed seed (SLUICE_CHAOS_SEED
# repeats a run); every wait is for something observable, never a sleep.
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_up_test import PYTHON, SLUICE_UP, alive, make_container, wait_until  # noqa: E402

SLUICE = os.environ.get('SLUICE_BIN', '')
SEED = int(os.environ.get('SLUICE_CHAOS_SEED', random.SystemRandom().randrange(1 << 30)))
TOKENS = 48


def process_state(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return None


def start_time(pid):
    """When pid started (clock ticks since boot): with the pid it names one
    process, where a busy machine may have given a dead member's pid away."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return int(f.read().rsplit(')', 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class ChaosTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print('chaos seed %d (SLUICE_CHAOS_SEED=%d repeats this run)' % (SEED, SEED), flush=True)
        cls.rng = random.Random(SEED)
        cls.scratch = tempfile.mkdtemp(prefix='sluice-chaos-')
        cls.container = make_container(cls.scratch)
        cls.env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(cls.scratch, 'xdg'))
        cls.instance = 'chaos-%d' % os.getpid()
        # sluice-io plans for a one-thread client: at its floor it holds the minimum cache, so a token
        # routed off it misses and waits on the daemon.
        plan = json.loads(subprocess.run([SLUICE, 'plan', cls.container, '--threads', '1', '--json'],
                                         capture_output=True, text=True, check=True).stdout)
        budget = plan['floor_bytes']
        up = subprocess.run([PYTHON, SLUICE_UP, cls.container, '--instance', cls.instance, '--readers', '2',
                             '--budget', str(budget), '--health-timeout', '2'],
                            env=cls.env, capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            raise AssertionError('sluice-up failed: ' + up.stderr)
        cls.prompt = ','.join(str(cls.rng.randrange(1, 200)) for _ in range(6))
        cls.seen = set()  # (pid, start time) of every process of the group seen alive
        cls.reference = cls.generate('reference')
        if cls.reference[0].returncode != 0:
            raise AssertionError('the undisturbed run failed: ' + cls.reference[0].stderr)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([PYTHON, SLUICE_UP, 'down', '--instance', cls.instance], env=cls.env, capture_output=True)
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def status(self):
        report = json.loads(subprocess.run([PYTHON, SLUICE_UP, 'status', '--json', '--instance', self.instance],
                                           env=self.env, capture_output=True, text=True).stdout)
        for member in report.get('members', []):
            if member['alive']:
                self.seen.add((member['pid'], start_time(member['pid'])))
        return report

    def member(self, name):
        return next(m for m in self.status()['members'] if m['name'] == name)

    @classmethod
    def client(cls, name):
        logits = os.path.join(cls.scratch, name + '.logits')
        argv = [SLUICE, 'run', cls.container, '--attach', cls.instance, '--prompt-ids', cls.prompt,
                '-n', str(TOKENS), '--temp', '0', '--dump-logits', logits]
        return subprocess.Popen(argv, env=cls.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE), logits

    @classmethod
    def generate(cls, name, fault=None):
        """Runs a client; `fault(client)` runs once it has streamed its first
        output, with the client stopped. Returns (completed, stdout, logits)."""
        proc, logits = cls.client(name)
        first = b''
        if fault is not None:
            # A token streamed: generation is under way. One byte from the pipe
            # itself: a buffered read would keep bytes communicate() never sees.
            first = os.read(proc.stdout.fileno(), 1)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                fault(proc)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=240)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, first + out, err.decode(errors='replace'))
        data = None
        if os.path.exists(logits):
            with open(logits, 'rb') as f:
                data = f.read()
        return done, done.stdout, data

    def check_identical(self, result):
        done, text, logits = result
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(text, self.reference[1])
        self.assertIsNotNone(logits)
        self.assertEqual(logits, self.reference[2], 'the logits differ from the undisturbed run')

    def replaced(self, name, old_pid):
        member = self.member(name)
        return member['pid'] != old_pid and member['alive'] and self.status()['answering']

    def settled(self):
        """Every member up and the router serving the daemon that answers now."""
        status = self.status()
        if not status.get('answering') or not all(m['alive'] for m in status['members']):
            return False
        stats = subprocess.run([SLUICE, 'stats', '--attach', self.instance, '--json'], env=self.env,
                               capture_output=True, text=True)
        if stats.returncode != 0:
            return False
        router = json.loads(stats.stdout).get('router') or {}
        return router.get('pid') == self.member('sluice-router')['pid']

    def run_case(self, name, signum):
        wait_until(self.settled, 'the group is settled', timeout=120)
        old = self.member(name)['pid']
        self.assertTrue(alive(old))
        stopped = []

        def fault(client):
            os.kill(old, signum)
            if signum == signal.SIGSTOP:
                wait_until(lambda: process_state(old) in ('T', 't', None), 'the member is stopped')
                stopped.append(old)

        result = self.generate('%s-%s' % (name, signal.Signals(signum).name), fault)
        self.check_identical(result)
        if name == 'sluice-io':
            self.assertIn('reattached to sluice-io', result[0].stderr)
        wait_until(lambda: self.replaced(name, old), '%s pid %d was replaced' % (name, old), timeout=120)
        wait_until(lambda: not alive(old), 'the old %s is gone' % name)
        return result

    def test_1_kill9_sluice_io(self):
        self.run_case('sluice-io', signal.SIGKILL)

    def test_2_sigstop_sluice_io(self):
        result = self.run_case('sluice-io', signal.SIGSTOP)
        log = os.path.join(self.env['XDG_RUNTIME_DIR'], 'sluice', self.instance + '.log')
        with open(log) as f:
            self.assertIn('gave no sign of life', f.read())
        self.assertEqual(result[0].returncode, 0)

    def test_3_kill9_sluice_router(self):
        self.run_case('sluice-router', signal.SIGKILL)

    def test_4_sigstop_sluice_router(self):
        self.run_case('sluice-router', signal.SIGSTOP)

    def test_5_nothing_left_after_down(self):
        status = self.status()
        sock, segment = status['socket'], '/dev/shm/' + status['segment']
        down = subprocess.run([PYTHON, SLUICE_UP, 'down', '--instance', self.instance], env=self.env,
                              capture_output=True, text=True)
        self.assertEqual(down.returncode, 0, down.stderr)
        self.seen.add((status['supervisor_pid'], start_time(status['supervisor_pid'])))
        for pid, started in self.seen:
            self.assertFalse(alive(pid) and start_time(pid) == started, 'pid %d is still alive' % pid)
        self.assertFalse(os.path.exists(sock))
        self.assertFalse(os.path.exists(segment))
        for entry in os.listdir('/proc'):
            if entry.isdigit():
                try:
                    with open('/proc/%s/cmdline' % entry, 'rb') as f:
                        argv = f.read().split(b'\0')
                except OSError:
                    continue
                self.assertNotIn(self.instance.encode(), argv, 'pid %s still runs for the instance' % entry)
        self.assertEqual([f for f in os.listdir(self.scratch) if '.partial' in f], [])


class UnsupervisedStopTest(unittest.TestCase):
    """No supervisor: a client waiting on a stopped sluice-io gives up after
    its --read-timeout, says why, and leaves no --dump-logits file."""

    def test_a_stopped_daemon_ends_the_wait_with_the_reason(self):
        scratch = tempfile.mkdtemp(prefix='sluice-chaos-stop-')
        daemon = None
        try:
            container = make_container(scratch)
            instance = 'chaos-stop-%d' % os.getpid()
            sock = os.path.join(scratch, 'io.sock')
            plan = json.loads(subprocess.run([SLUICE, 'plan', container, '--threads', '1', '--json'],
                                             capture_output=True, text=True, check=True).stdout)
            daemon = subprocess.Popen([os.environ['SLUICE_IO_BIN'], container, '--instance', instance, '--socket', sock,
                                       '--readers', '1', '--budget', str(plan['floor_bytes'])],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda: os.path.exists(sock) and subprocess.run(
                [SLUICE, 'stats', '--attach', sock], capture_output=True).returncode == 0, 'sluice-io serves')
            logits = os.path.join(scratch, 'stopped.logits')
            client = subprocess.Popen([SLUICE, 'run', container, '--attach', sock, '--prompt-ids', '5,6,7', '-n', '64',
                                       '--temp', '0', '--dump-logits', logits, '--read-timeout', '1'],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            os.read(client.stdout.fileno(), 1)
            os.kill(client.pid, signal.SIGSTOP)
            os.kill(daemon.pid, signal.SIGSTOP)
            wait_until(lambda: process_state(daemon.pid) in ('T', 't'), 'sluice-io is stopped')
            os.kill(client.pid, signal.SIGCONT)
            _, err = client.communicate(timeout=120)
            err = err.decode(errors='replace')
            self.assertEqual(client.returncode, 1, err)
            self.assertIn('did not land within', err)
            self.assertIn('--read-timeout', err)
            self.assertIn('sluice-io (pid %d) is alive' % daemon.pid, err)
            self.assertIn('stopped or stuck', err)
            self.assertEqual([f for f in os.listdir(scratch) if f.startswith('stopped.logits')], [])
        finally:
            if daemon is not None:
                daemon.kill()
                daemon.wait()
            subprocess.run([PYTHON, SLUICE_UP, 'down', '--instance', 'chaos-stop-%d' % os.getpid()],
                           env=dict(os.environ, XDG_RUNTIME_DIR=os.path.join(scratch, 'xdg')), capture_output=True)
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    unittest.main()
