# tests/scripts/helpers.py: shared setup of the Python tests: makes scripts/
# importable and gives each test a scratch directory. No assertions here.
import os
import subprocess
import sys
import tempfile

SOURCE_ROOT = os.environ.get("SLUICE_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(SOURCE_ROOT, "scripts")
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
SKIP = 77  # meson's exit code for a skipped test
sys.path.insert(0, SCRIPTS)


def scratch():
    return tempfile.TemporaryDirectory(prefix="sluice-py-test-")


def run_script(name, *args, check=True):
    """Runs scripts/<name> (or `-m module`) with PYTHON; returns CompletedProcess."""
    cmd = [PYTHON] + (list(args) if name is None else [os.path.join(SCRIPTS, name), *args])
    env = dict(os.environ, PYTHONPATH=SCRIPTS)
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def make_checkpoint(out_dir, family, *extra):
    run_script("make_tiny_checkpoint.py", family, out_dir, *extra)
    return out_dir
