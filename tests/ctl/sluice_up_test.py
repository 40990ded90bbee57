#!/usr/bin/python3
# tests/ctl/sluice_up_test.py: the supervisor as a user drives it: up returns
# with the group running, status shows it, a sluice-io killed with SIGKILL is
# restarted, down stops everything and leaves no socket, segment or state file.
# A supervisor killed with SIGKILL takes its members with it; members without
# a supervisor are told apart from "down", block a new up and are stopped by down.
# `--serve PORT` adds a `sluice serve` member attached to the group's daemon.
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

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


def wait_until(condition, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError('timed out waiting until ' + what)


def make_container(scratch):
    checkpoint = os.path.join(scratch, 'checkpoint')
    container = os.path.join(scratch, 'tiny.sluice')
    made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint],
                          capture_output=True, text=True)
    # A fixture that cannot be built is a failure, never a skip.
    assert made.returncode == 0, 'make_tiny_checkpoint.py failed: ' + made.stderr
    converted = subprocess.run([os.environ['SLUICE_BIN'], 'convert', checkpoint, container],
                               capture_output=True, text=True)
    assert converted.returncode == 0, '`sluice convert` failed: ' + converted.stderr
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

    def paths(self, instance):
        run = os.path.join(self.env['XDG_RUNTIME_DIR'], 'sluice')
        return {'socket': os.path.join(run, instance + '.sock'), 'segment': '/dev/shm/sluice-%d-%s' % (os.geteuid(), instance),
                'state': os.path.join(run, instance + '.group.json'), 'log': os.path.join(run, instance + '.log')}

    def test_kill9_of_the_supervisor_takes_the_members_along(self):
        instance = self.instance + '-k9'
        up = self.sluice_up(self.container, '--instance', instance, '--readers', '2')
        self.assertEqual(up.returncode, 0, up.stderr)
        status = json.loads(self.sluice_up('status', '--json', '--instance', instance).stdout)
        members = [m['pid'] for m in status['members']]
        self.assertEqual(len(members), 2)
        os.kill(status['supervisor_pid'], signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in members), 'the members died with the supervisor')
        where = self.paths(instance)
        wait_until(lambda: not os.path.exists(where['socket']), 'sluice-io removed its socket')
        self.assertFalse(os.path.exists(where['segment']))
        gone = self.sluice_up('status', '--instance', instance)
        self.assertEqual(gone.returncode, 3, gone.stdout)
        self.assertIn('not up', gone.stdout)
        down = self.sluice_up('down', '--instance', instance)
        self.assertEqual(down.returncode, 0, down.stderr)
        self.assertFalse(os.path.exists(where['state']))
        # down rotates the log: the run's log is kept once, as INSTANCE.log.1, and --help says so.
        self.assertFalse(os.path.exists(where['log']))
        self.assertTrue(os.path.exists(where['log'] + '.1'))
        for args in (['--help'], ['down', '--help']):
            self.assertIn('rotated to INSTANCE.log.1', ' '.join(self.sluice_up(*args).stdout.split()))

    def test_members_without_a_supervisor(self):
        # A sluice-io of the instance that no supervisor watches (its supervisor
        # and state file are gone): what a crash of an older sluice-up leaves.
        instance = self.instance + '-orphan'
        where = self.paths(instance)
        os.makedirs(os.path.dirname(where['socket']), mode=0o700, exist_ok=True)
        orphan = subprocess.Popen([os.environ['SLUICE_IO_BIN'], self.container, '--instance', instance,
                                   '--socket', where['socket'], '--readers', '1'], env=self.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: os.path.exists(where['socket']) and os.path.exists(where['segment']),
                       'the orphan serves')
            status = self.sluice_up('status', '--instance', instance)
            self.assertEqual(status.returncode, 4, status.stdout)
            self.assertIn('NOT supervised', status.stdout)
            self.assertIn('sluice-io pid %d' % orphan.pid, status.stdout)
            report = json.loads(self.sluice_up('status', '--json', '--instance', instance).stdout)
            self.assertEqual(report['state'], 'orphaned')
            self.assertEqual(report['orphans'], [{'name': 'sluice-io', 'pid': orphan.pid}])

            again = self.sluice_up(self.container, '--instance', instance)
            self.assertEqual(again.returncode, 1)
            self.assertIn('sluice-io pid %d' % orphan.pid, again.stderr)
            self.assertIn(instance, again.stderr)
            self.assertEqual(orphan.poll(), None, 'a refused up must not touch the running member')

            down = self.sluice_up('down', '--instance', instance)
            self.assertEqual(down.returncode, 0, down.stderr)
            self.assertIn('stopped sluice-io pid %d' % orphan.pid, down.stdout)
            orphan.wait(timeout=30)
            for leftover in ('socket', 'segment', 'state'):
                self.assertFalse(os.path.exists(where[leftover]), leftover)
            self.assertEqual(self.sluice_up('status', '--instance', instance).returncode, 3)
        finally:
            if orphan.poll() is None:
                orphan.kill()
                orphan.wait()

    def test_the_restart_delay_resets_once_the_member_is_healthy(self):
        instance = self.instance + '-backoff'
        where = self.paths(instance)
        up = self.sluice_up(self.container, '--instance', instance, '--readers', '1')
        self.assertEqual(up.returncode, 0, up.stderr)
        try:
            for round in range(3):
                status = json.loads(self.sluice_up('status', '--json', '--instance', instance).stdout)
                daemon = status['members'][0]
                os.kill(daemon['pid'], signal.SIGKILL)
                wait_until(lambda: (lambda s: s['members'][0]['pid'] != daemon['pid'] and s['answering'])(
                    json.loads(self.sluice_up('status', '--json', '--instance', instance).stdout)),
                    'restart %d answers' % (round + 1))
            with open(where['log']) as f:
                delays = re.findall(r'sluice-io pid \d+ died \(status -?\d+\) after [\d.]+ s; restarting in ([\d.]+) s',
                                    f.read())
            # Each death came after the member was back and healthy: the first delay every time.
            self.assertGreaterEqual(len(delays), 3, delays)
            self.assertEqual(set(delays), {'0.5'}, delays)
        finally:
            down = self.sluice_up('down', '--instance', instance)
            self.assertEqual(down.returncode, 0, down.stderr)

    def test_argument_errors_are_one_line(self):
        for args, needle in ((['--instance', 'bad/name', self.container], "'bad/name' is not an instance name"),
                             (['status', '--instance', 'bad/name'], 'is not an instance name'),
                             ([self.container, '--serve', '70000', '--instance', self.instance + '-serve'],
                              'not a TCP port'),
                             ([self.container, '--readers', '0', '--instance', self.instance + '-r'], '--readers 0'),
                             ([self.container, '--parallel', '65', '--instance', self.instance + '-p'], '--parallel 65'),
                             ([self.container, '--budget', '3Q', '--instance', self.instance + '-b'],
                              "--budget '3Q': bad size"),
                             ([self.container, '--lookahead', '-1', '--instance', self.instance + '-l'],
                              '--lookahead -1'),
                             ([self.container, '--no-such-flag'], '--no-such-flag')):
            done = self.sluice_up(*args)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
            self.assertTrue(done.stderr.startswith('sluice-up: error: '), done.stderr)
            self.assertIn(needle, done.stderr)
        for bad in ('0.1', 'x'):
            done = self.sluice_up(self.container, '--health-timeout', bad, '--instance', self.instance + '-h')
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertIn('--health-timeout', done.stderr)
        version = self.sluice_up('--version')
        self.assertEqual(version.returncode, 0)
        self.assertRegex(version.stdout, r'^sluice-up \d+\.\d+\.\d+\n$')

    def test_serve_runs_as_a_supervised_member(self):
        instance = self.instance + '-serve'
        with socket.socket() as probe:  # a port free a moment ago; sluice serve refuses a taken one
            probe.bind(('127.0.0.1', 0))
            port = probe.getsockname()[1]
        up = self.sluice_up(self.container, '--instance', instance, '--serve', str(port), '--parallel', '2')
        try:
            self.assertEqual(up.returncode, 0, up.stderr)
            report = json.loads(self.sluice_up('status', '--json', '--instance', instance).stdout)
            serve = [m for m in report['members'] if m['name'] == 'serve']
            self.assertEqual(len(serve), 1, report)
            self.assertTrue(serve[0]['alive'])
            self.assertIn('--attach', serve[0]['argv'])
            # Both sides of the mailbox agree on its rows: the server's sequences, the daemon's mailboxes.
            daemon = [m for m in report['members'] if m['name'] == 'sluice-io'][0]
            for member in (serve[0], daemon):
                at = member['argv'].index('--parallel')
                self.assertEqual(member['argv'][at + 1], '2', member)
            body = json.dumps({'prompt': [5, 6, 7], 'max_tokens': 3, 'temperature': 0}).encode()
            request = urllib.request.Request('http://127.0.0.1:%d/v1/completions' % port, data=body,
                                             headers={'Content-Type': 'application/json'})
            with urllib.request.urlopen(request, timeout=60) as reply:
                answer = json.loads(reply.read())
            self.assertEqual(answer['usage']['completion_tokens'], 3)
            # Experts came through the group's daemon: the request asked it for some.
            self.assertGreater(answer['sluice']['experts']['requested'], 0)
            serve_pid = serve[0]['pid']
        finally:
            down = self.sluice_up('down', '--instance', instance)
        self.assertEqual(down.returncode, 0, down.stderr)
        self.assertFalse(alive(serve_pid))

    def test_a_checkout_finds_its_own_build_without_environment(self):
        # A checkout's layout: scripts/sluice-up beside build/<room>/<program>.
        checkout = os.path.join(self.scratch, 'checkout')
        os.makedirs(os.path.join(checkout, 'scripts'), exist_ok=True)
        shutil.copy(SLUICE_UP, os.path.join(checkout, 'scripts', 'sluice-up'))
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.environ['SLUICE_BIN'])))
        for room, program in (('compute/cli', 'sluice'), ('ioworker', 'sluice-io'), ('router', 'sluice-router')):
            os.makedirs(os.path.join(checkout, 'build', room), exist_ok=True)
            os.symlink(os.path.join(build, room, program), os.path.join(checkout, 'build', room, program))
        env = {k: v for k, v in self.env.items() if not k.startswith('SLUICE_')}
        env['PATH'] = '/usr/bin:/bin'
        instance = self.instance + '-checkout'
        script = os.path.join(checkout, 'scripts', 'sluice-up')
        up = subprocess.run([PYTHON, script, self.container, '--instance', instance], env=env,
                            capture_output=True, text=True, timeout=120)
        try:
            self.assertEqual(up.returncode, 0, up.stderr)
            report = json.loads(subprocess.run([PYTHON, script, 'status', '--json', '--instance', instance], env=env,
                                               capture_output=True, text=True).stdout)
            self.assertTrue(report['answering'])
            self.assertEqual(report['members'][0]['argv'][0], os.path.join(checkout, 'build', 'ioworker', 'sluice-io'))
        finally:
            down = subprocess.run([PYTHON, script, 'down', '--instance', instance], env=env, capture_output=True,
                                  text=True)
        self.assertEqual(down.returncode, 0, down.stderr)

    def test_bad_model_is_refused(self):
        done = self.sluice_up(os.path.join(self.scratch, 'missing.sluice'), '--instance', self.instance + 'x')
        self.assertNotEqual(done.returncode, 0)
        self.assertIn('missing.sluice', done.stderr)


if __name__ == '__main__':
    unittest.main()
