# tests/compute/capi/checked_run.py: what the C API's Python tests share: a
# command run to completion whose failure shows its whole output.
import subprocess


def run(argv, **kwargs):
    done = subprocess.run(argv, capture_output=True, timeout=240, **kwargs)
    assert done.returncode == 0, '%s exited %d:\n%s%s' % (' '.join(argv), done.returncode,
                                                       done.stdout.decode(errors='replace'),
                                                       done.stderr.decode(errors='replace'))
    return done
