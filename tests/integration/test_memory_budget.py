#!/usr/bin/python3
# The memory budget holds for a whole `sluice run`: on a container whose
# experts are larger than the budget, the process's peak RSS stays under the
# budget, while the cache really is under pressure. A budget under the floor
# is refused with the plan. With --cgroup, the kernel is the judge: `run`
# (prompts of 1, 64 and 300 tokens), `bench decode`, `eval`, `chat` (two
# turns) and `serve --parallel 2` (two requests at once), at --threads 1 and
# 2, each inside a memory cgroup limited to its own --budget (the plan's
# floor, and floor + 1 working set, for those threads and sequences, as
# written, not rounded to a page), exit 0 with no OOM kill and a peak charge
# under the limit; a table of peak against budget is printed (exit 77, a
# capability skip, where no child cgroup can be made).
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid

ROOT = os.environ["SLUICE_SOURCE_ROOT"]
SLUICE = os.environ["SLUICE_BIN"]


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def peak_rss_bytes(*args):
    """(exit status, stdout, peak RSS in bytes) of one child, from wait4."""
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = child.stdout.read()
    child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, out.decode(), usage.ru_maxrss * 1024


def make_model(work, hidden=512, experts=96):
    checkpoint, model = os.path.join(work, "ck"), os.path.join(work, "m.sluice")
    run("/usr/bin/python3", os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "olmoe", checkpoint,
        "--seed", "3", "--set", f"hidden_size={hidden}", "--set", f"intermediate_size={hidden}", "--set",
        f"num_experts={experts}", "--set", "num_hidden_layers=4", "--set", "num_experts_per_tok=8", "--set",
        "max_position_embeddings=320")
    run(SLUICE, "convert", checkpoint, model, "-q")
    return model


def peak_under_budget():
    with tempfile.TemporaryDirectory(prefix="sluice-budget-") as work:
        model = make_model(work)
        plan = json.loads(run(SLUICE, "plan", model, "--json"))
        budget = plan["floor_bytes"] + plan["working_set_bytes"]
        info = json.loads(run(SLUICE, "info", model, "--json"))
        expert_bytes = info["expert_bytes"]
        if not expert_bytes > budget:
            sys.exit(f"test container too small: experts {expert_bytes} B fit the budget {budget} B")

        status, out, peak = peak_rss_bytes(SLUICE, "run", model, "--prompt-ids", "1,2,3,4,5,6,7,8,9,10,11,12",
                                           "-n", "48", "--budget", str(budget), "--json")
        if status != 0:
            sys.exit(f"sluice run --budget {budget} failed with status {status}")
        experts = json.loads(out)["experts"]
        print(f"budget {budget} B, peak RSS {peak} B, experts {expert_bytes} B, "
              f"requested {experts['requested']}, hits {experts['hits']}, reads {experts['reads']}")
        if not peak <= budget:
            sys.exit(f"peak RSS {peak} B exceeds the budget {budget} B")
        if not experts["reads"] > 0 or not experts["hits"] < experts["requested"]:
            sys.exit(f"the cache was never under pressure: {experts}")

        refused = subprocess.run([SLUICE, "run", model, "--prompt-ids", "1,2", "-n", "1", "--budget",
                                  str(plan["floor_bytes"] - 1)], capture_output=True, text=True)
        if refused.returncode == 0 or "under the floor" not in refused.stderr:
            sys.exit(f"a budget under the floor was not refused with the plan: {refused.stderr}")


class MemoryCgroup:
    """A child of this process's memory cgroup (v1 or v2) with a limit; None when none can be made."""

    @staticmethod
    def make(limit):
        with open("/proc/self/cgroup") as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f]
        for _, controllers, path in entries:
            if "memory" in controllers.split(","):
                base, limit_file, version = "/sys/fs/cgroup/memory" + path, "memory.limit_in_bytes", 1
                break
        else:
            base, limit_file, version = "/sys/fs/cgroup" + entries[0][2], "memory.max", 2
        directory = os.path.join(base, f"sluice-test-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(directory)
        except OSError:
            return None
        group = MemoryCgroup(directory, version)
        try:
            with open(os.path.join(directory, limit_file), "w") as f:
                f.write(str(limit))
        except OSError:
            group.remove()
            return None
        return group

    def __init__(self, directory, version):
        self.directory, self.version = directory, version

    def run(self, *args, stdin=None):
        """Runs args inside the group (stdin: text to feed it): (exit status, stderr, OOM kills)."""
        procs = os.path.join(self.directory, "cgroup.procs")

        def join_the_group():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        child = subprocess.run(args, capture_output=True, text=True, preexec_fn=join_the_group, input=stdin,
                               stdin=None if stdin is not None else subprocess.DEVNULL)
        return child.returncode, child.stderr, self.oom_kills()

    def oom_kills(self):
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with open(os.path.join(self.directory, name)) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self):
        os.rmdir(self.directory)


def cgroup_peak(group):
    """The group's largest charge (v1 memory.max_usage_in_bytes, v2 memory.peak where the kernel has it)."""
    name = "memory.max_usage_in_bytes" if group.version == 1 else "memory.peak"
    try:
        with open(os.path.join(group.directory, name)) as f:
            return int(f.read())
    except OSError:
        return None


def serve_two_requests(group, args):
    """`sluice serve` inside the group answering two concurrent completions: (exit status, stderr)."""
    procs = os.path.join(group.directory, "cgroup.procs")

    def join_the_group():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=join_the_group)
    try:
        line = server.stdout.readline()  # the server prints it once bound, or exits
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not match:
            server.wait(timeout=60)
            return server.returncode, server.stderr.read()
        url = f"http://127.0.0.1:{match.group(1)}/v1/completions"
        answers = [None, None]

        def ask(i):
            body = json.dumps({"prompt": [1 + i, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 12, "temperature": 0}).encode()
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    answers[i] = json.loads(reply.read())["usage"]["completion_tokens"]
            except (OSError, ValueError, KeyError) as e:
                answers[i] = repr(e)

        askers = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        err = server.stderr.read()
        # Each a completion (a random model may end one early at its end-of-text token).
        if not all(isinstance(tokens, int) and 1 <= tokens <= 12 for tokens in answers):
            return (server.returncode or 1), f"answers {answers}; {err}"
        return server.returncode, err
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def killed_by_the_kernel_at_its_own_budget():
    with tempfile.TemporaryDirectory(prefix="sluice-cgroup-") as work:
        model = make_model(work, hidden=256, experts=32)
        page = os.sysconf("SC_PAGE_SIZE")
        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            f.write("the river ran down to the sea and the sea was wide " * 12)
        prompts = {n: ",".join(str(1 + i % 250) for i in range(n)) for n in (1, 64, 300)}
        failures, table = [], []
        for threads in (1, 2):
            for sets in (0, 1):
                cases = [(f"run, {n}-token prompt", 1,
                          ["run", model, "--prompt-ids", prompt, "-n", "8", "--temp", "0"]) for n, prompt in prompts.items()]
                cases += [("bench decode", 1, ["bench", "decode", model, "-n", "8", "--prompt-tokens", "64", "--disk-seconds", "0.1",
                                            "--json"]),
                          ("eval", 1, ["eval", model, "--text", text, "--json"]),
                          ("chat, two turns", 1, ["chat", model, "-n", "8", "--temp", "0"]),
                          ("serve --parallel 2", 2, ["serve", model, "--port", "0", "--parallel", "2"])]
                for name, parallel, args in cases:
                    plan_args = [SLUICE, "plan", model, "--threads", str(threads), "--json"]
                    if args[0] == "serve":
                        plan_args += ["--parallel", str(parallel)]
                    if args[0] == "chat":
                        plan_args += ["--session"]  # its /save and /load copy the state
                    plan = json.loads(run(*plan_args))
                    # The limit as a user might write it, not a page multiple (the kernel keeps it rounded
                    # down to whole pages, at or above the plan): the same number as --budget must be taken.
                    budget = -(-(plan["floor_bytes"] + sets * plan["working_set_bytes"]) // page) * page + page // 2 + 1
                    group = MemoryCgroup.make(budget)
                    if group is None:
                        print("CAPABILITY-SKIP: writable cgroupfs: no child memory cgroup can be made here")
                        sys.exit(77)
                    argv = [SLUICE, *args, "--budget", str(budget), "--threads", str(threads)]
                    try:
                        if args[0] == "serve":
                            status, err = serve_two_requests(group, argv)
                            kills = group.oom_kills()
                        elif args[0] == "chat":
                            status, err, kills = group.run(*argv, stdin="hello there\nand then the river\n")
                        else:
                            status, err, kills = group.run(*argv)
                        peak = cgroup_peak(group)
                    finally:
                        group.remove()
                    table.append((name, threads, sets, budget, peak, status, kills))
                    over = peak is not None and peak > budget
                    if status != 0 or kills != 0 or over:
                        failures.append(f"{name} at --threads {threads}, floor + {sets} working sets ({budget} B): "
                                        f"exit {status}, OOM kills {kills}, peak {peak} B; {err.strip()[-300:]}")
        print(f"{'case':<24} {'threads':>7} {'budget':>22} {'peak':>12} {'peak/budget':>11} exit oom")
        for name, threads, sets, budget, peak, status, kills in table:
            ratio = f"{peak / budget:.3f}" if peak is not None else "-"
            print(f"{name:<24} {threads:>7} {f'floor+{sets}: {budget}':>22} {peak if peak is not None else '-':>12} "
                  f"{ratio:>11} {status:>4} {kills:>3}")
        if failures:
            sys.exit("a run inside a memory cgroup of its own budget failed:\n" + "\n".join(failures))


if __name__ == "__main__":
    if sys.argv[1:] == ["--cgroup"]:
        killed_by_the_kernel_at_its_own_budget()
    else:
        peak_under_budget()
