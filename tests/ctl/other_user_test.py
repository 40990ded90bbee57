#!/usr/bin/python3
# tests/ctl/other_user_test.py: a second user on the machine. As root it makes
# two throwaway users, an attacker and a victim; the attacker plants the
# victim's fallback runtime directory (/tmp/sluice-<uid>) as a 0777 directory
# with symlinks in it, or as a symlink, and sluice-io, sluice-up and an
# attaching client of the victim must refuse it, touching nothing. Both users
# then run an instance of the same name side by side. Skipped unless root.
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get('SLUICE_SOURCE_ROOT', os.path.join(os.path.dirname(__file__), '..', '..'))
SLUICE_UP = os.path.join(ROOT, 'scripts', 'sluice-up')
PYTHON = os.environ.get('PYTHON', '/usr/bin/python3')
SLUICE = os.environ.get('SLUICE_BIN', '')
SLUICE_IO = os.environ.get('SLUICE_IO_BIN', '')


def skip_for_lack_of(capability, why):
    print('CAPABILITY-SKIP: %s: %s' % (capability, why))
    sys.exit(77)


class User:
    def __init__(self, name):
        self.name = name
        made = subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', name],
                              capture_output=True, text=True)
        if made.returncode != 0:
            skip_for_lack_of('useradd', 'useradd %s failed: %s' % (name, made.stderr.strip()))
        out = subprocess.run(['id', '-u', name], capture_output=True, text=True, check=True)
        self.uid = int(out.stdout)
        self.gid = int(subprocess.run(['id', '-g', name], capture_output=True, text=True, check=True).stdout)

    def delete(self):
        subprocess.run(['userdel', self.name], capture_output=True)

    def argv(self, argv):
        return ['setpriv', '--reuid', str(self.uid), '--regid', str(self.gid), '--clear-groups'] + argv

    def env(self, **extra):
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'HOME': '/tmp',
               'SLUICE_BIN': SLUICE, 'SLUICE_IO_BIN': SLUICE_IO}
        env.update(extra)
        return env

    def run(self, argv, **extra_env):
        return subprocess.run(self.argv(argv), env=self.env(**extra_env), capture_output=True, text=True, timeout=60)

    def python(self, code):
        done = self.run([PYTHON, '-c', code])
        assert done.returncode == 0, done.stderr

    def spawn(self, argv, log, **extra_env):
        return subprocess.Popen(self.argv(argv), env=self.env(**extra_env), stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)


def answers(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_answers(path, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if answers(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def copy_programs(scratch):
    """The checkout may sit in a directory other users cannot enter (a
    mktemp -d clone): the throwaway users run copies of the programs."""
    global SLUICE, SLUICE_IO, SLUICE_UP
    bin_dir = os.path.join(scratch, 'bin')
    os.makedirs(bin_dir)
    copies = []
    for program in (SLUICE, SLUICE_IO, SLUICE_UP):
        copies.append(shutil.copy(program, os.path.join(bin_dir, os.path.basename(program))))
    SLUICE, SLUICE_IO, SLUICE_UP = copies


class OtherUserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tag = str(os.getpid() % 100000)
        cls.attacker = User('slprobe-a' + tag)
        cls.victim = User('slprobe-v' + tag)
        cls.scratch = tempfile.mkdtemp(prefix='sluice-other-user-')
        os.chmod(cls.scratch, 0o755)
        copy_programs(cls.scratch)
        checkpoint = os.path.join(cls.scratch, 'checkpoint')
        cls.model = os.path.join(cls.scratch, 'tiny.sluice')
        made = subprocess.run([PYTHON, os.path.join(ROOT, 'scripts', 'make_tiny_checkpoint.py'), 'olmoe', checkpoint],
                              capture_output=True, text=True)
        # A fixture that cannot be built is a failure, never a skip.
        assert made.returncode == 0, 'make_tiny_checkpoint.py failed: ' + made.stderr
        converted = subprocess.run([SLUICE, 'convert', checkpoint, cls.model], capture_output=True, text=True)
        assert converted.returncode == 0, '`sluice convert` failed: ' + converted.stderr
        for base, dirs, files in os.walk(cls.scratch):
            for name in dirs + files:
                os.chmod(os.path.join(base, name), 0o755)
        cls.victim_dir = '/tmp/sluice-%d' % cls.victim.uid

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)
        cls.attacker.delete()
        cls.victim.delete()

    def setUp(self):
        self.clear_victim_dir()
        # A file of the victim's the attacker would like overwritten.
        self.precious = os.path.join(self.scratch, 'precious')
        with open(self.precious, 'w') as f:
            f.write('precious\n')
        os.chown(self.precious, self.victim.uid, self.victim.gid)

    def tearDown(self):
        self.clear_victim_dir()

    def clear_victim_dir(self):
        if os.path.islink(self.victim_dir):
            os.unlink(self.victim_dir)
        shutil.rmtree(self.victim_dir, ignore_errors=True)

    def assert_victim_refuses(self, message):
        io = self.victim.run([SLUICE_IO, self.model, '--instance', 'default'])
        self.assertNotEqual(io.returncode, 0)
        self.assertIn(message, io.stderr)
        up = self.victim.run([PYTHON, SLUICE_UP, self.model, '--instance', 'default'])
        self.assertNotEqual(up.returncode, 0)
        self.assertIn(message, up.stderr)
        self.assertNotIn('Traceback', up.stderr)
        client = self.victim.run([SLUICE, 'run', self.model, '--attach', 'default', '--prompt-ids', '1,2', '-n', '1'])
        self.assertNotEqual(client.returncode, 0)
        self.assertIn(message, client.stderr)
        with open(self.precious) as f:
            self.assertEqual(f.read(), 'precious\n')

    def test_a_planted_world_writable_directory_with_symlinks_is_refused(self):
        self.attacker.python(
            'import os; d=%r; os.mkdir(d); os.chmod(d, 0o777); '
            'os.symlink(%r, d + "/default.log"); os.symlink(%r, d + "/default.group.json.tmp")'
            % (self.victim_dir, self.precious, self.precious))
        self.assert_victim_refuses('the runtime directory belongs to uid %d, not to you (uid %d)'
                                   % (self.attacker.uid, self.victim.uid))
        self.assertEqual(sorted(os.listdir(self.victim_dir)), ['default.group.json.tmp', 'default.log'])

    def test_a_planted_symlink_as_the_directory_is_refused(self):
        target = os.path.join(self.scratch, 'attacker-dir')
        os.mkdir(target)
        os.chown(target, self.attacker.uid, self.attacker.gid)
        self.attacker.python('import os; os.chmod(%r, 0o777); os.symlink(%r, %r)'
                             % (target, target, self.victim_dir))
        self.assert_victim_refuses('the runtime directory is a symlink; refusing to use it')
        self.assertEqual(os.listdir(target), [])

    def test_the_users_own_directory_with_a_wide_mode_is_refused(self):
        self.victim.python('import os; os.mkdir(%r); os.chmod(%r, 0o755)' % (self.victim_dir, self.victim_dir))
        self.assert_victim_refuses('the runtime directory has mode 0755; it must be private (0700)')

    def test_a_missing_directory_is_created_private(self):
        io = self.victim.spawn([SLUICE_IO, self.model, '--instance', 'mine'], subprocess.DEVNULL)
        try:
            self.assertTrue(wait_answers(self.victim_dir + '/mine.sock', io))
            info = os.lstat(self.victim_dir)
            self.assertEqual(info.st_uid, self.victim.uid)
            self.assertEqual(info.st_mode & 0o777, 0o700)
        finally:
            io.send_signal(signal.SIGTERM)
            io.wait(timeout=30)

    def test_instance_names_do_not_collide_across_users(self):
        procs = []
        try:
            for user in (self.attacker, self.victim):
                runtime = os.path.join(self.scratch, 'xdg-%d' % user.uid)
                os.mkdir(runtime, 0o700)
                os.chown(runtime, user.uid, user.gid)
                log = open(os.path.join(self.scratch, 'io-%d.log' % user.uid), 'w')
                proc = user.spawn([SLUICE_IO, self.model, '--instance', 'shared'], log, XDG_RUNTIME_DIR=runtime)
                procs.append(proc)
                with open(log.name) as f:
                    self.assertTrue(wait_answers(runtime + '/sluice/shared.sock', proc), f.read())
            for user in (self.attacker, self.victim):
                info = os.stat('/dev/shm/sluice-%d-shared' % user.uid)
                self.assertEqual(info.st_uid, user.uid)
                self.assertEqual(info.st_mode & 0o777, 0o600)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        for user in (self.attacker, self.victim):
            self.assertFalse(os.path.exists('/dev/shm/sluice-%d-shared' % user.uid))


if __name__ == '__main__':
    if os.geteuid() != 0:
        skip_for_lack_of('root', 'needs root to make the throwaway users')
    for tool in ('useradd', 'userdel', 'setpriv'):
        if shutil.which(tool) is None:
            skip_for_lack_of(tool, tool + ' is not installed')
    unittest.main()
