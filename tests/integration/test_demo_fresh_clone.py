#!/usr/bin/python3
# The quick start from a fresh clone: `git clone` of this checkout's
# committed tree, then its `scripts/demo` (setup, build, convert, generate,
# the process group, stats, down) must finish with status 0, print English
# from the trained model and the cache statistics, end with the PATH line,
# and leave no process, segment or socket behind. Exit 77 (a skip) when the
# source tree is not a git checkout.
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ["SLUICE_SOURCE_ROOT"]


def live_processes_under(path):
    """pids whose command line names a file under `path`."""
    found = []
    for entry in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(entry, "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if any(w.startswith(path.encode()) for w in words):
            found.append(int(entry.split("/")[2]))
    return found


def main():
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        print(f"{ROOT} is not a git checkout: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="sluice-fresh-clone-") as work:
        clone = os.path.join(work, "sluice")
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        # The demo names its instance demo-PID; other tests may own other segments meanwhile.
        demo_segments = f"/dev/shm/sluice-{os.geteuid()}-demo-*"
        segments_before = set(glob.glob(demo_segments))
        env = dict(os.environ, SLUICE_DEMO_DIR=os.path.join(work, "demo"), TERM="dumb")
        demo = subprocess.run([os.path.join(clone, "scripts", "demo")], cwd=work, env=env, capture_output=True,
                              text=True)
        out = re.sub(r"\x1b\[[0-9;]*m", "", demo.stdout)
        if demo.returncode != 0:
            sys.exit(f"scripts/demo of a fresh clone failed with status {demo.returncode}:\n"
                     f"{out[-3000:]}\n{demo.stderr[-3000:]}")
        print(out[-2500:])

        # The greedy generation after its step title: the prompt, then the model's words.
        generated = out.split("== generate in one process", 1)[1].split("\n", 2)[1]
        words = re.findall(r"[A-Za-z]+", generated)
        if len(words) < 20 or sum(len(w) for w in words) < 0.7 * len(generated):
            sys.exit(f"the demo's generation is not English: {generated!r}")
        for needle in ("== cache statistics of the daemon", "hit", "== take the group down", "export PATH="):
            if needle not in out:
                sys.exit(f"the demo's output lacks {needle!r}")
        if not out.rstrip().splitlines()[-1].startswith("export PATH="):
            sys.exit("the demo does not end with the PATH line")

        left = live_processes_under(clone)
        if left:
            sys.exit(f"processes of the clone still run after the demo: {left}")
        leaked = set(glob.glob(demo_segments)) - segments_before
        if leaked:
            sys.exit(f"the demo left shared memory segments: {sorted(leaked)}")


if __name__ == "__main__":
    main()
