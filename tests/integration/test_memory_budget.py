#!/usr/bin/python3
# The memory budget holds for a whole `sluice run`: on a container whose
# experts are larger than the budget, the process's peak RSS stays under the
# budget, while the cache really is under pressure. A budget under the floor
# is refused with the plan. With --cgroup, the kernel is the judge: `run`
# (prompts of several full prefill chunks) and `bench decode` inside a memory
# cgroup limited to their own --budget, at the floor and one and two working
# sets above it, are never OOM-killed (exit 77, a skip, where no child
# cgroup can be made).
import json
import os
import subprocess
import sys
import tempfile
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


def make_model(work):
    checkpoint, model = os.path.join(work, "ck"), os.path.join(work, "m.sluice")
    run("/usr/bin/python3", os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "olmoe", checkpoint,
        "--seed", "3", "--set", "hidden_size=512", "--set", "intermediate_size=512", "--set", "num_experts=64",
        "--set", "num_hidden_layers=4", "--set", "num_experts_per_tok=8")
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

    def run(self, *args):
        """Runs args inside the group: (exit status, stderr, OOM kills)."""
        procs = os.path.join(self.directory, "cgroup.procs")

        def join_the_group():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        child = subprocess.run(args, capture_output=True, text=True, preexec_fn=join_the_group)
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


def killed_by_the_kernel_at_its_own_budget():
    with tempfile.TemporaryDirectory(prefix="sluice-cgroup-") as work:
        model = make_model(work)
        plan = json.loads(run(SLUICE, "plan", model, "--json"))
        page = os.sysconf("SC_PAGE_SIZE")
        prompt = ",".join(str(1 + i % 250) for i in range(200))  # three full chunks and a partial one
        failures = []
        for sets in (0, 1, 2):
            budget = -(-(plan["floor_bytes"] + sets * plan["working_set_bytes"]) // page) * page
            group = MemoryCgroup.make(budget)
            if group is None:
                print("no child memory cgroup can be made here: skipped")
                sys.exit(77)
            try:
                for args in ([SLUICE, "run", model, "--prompt-ids", prompt, "-n", "16", "--budget", str(budget)],
                             [SLUICE, "bench", "decode", model, "--budget", str(budget), "-n", "16", "--json"]):
                    status, err, kills = group.run(*args)
                    print(f"floor + {sets} working sets ({budget} B): {' '.join(args[1:3])} exit {status}, "
                          f"OOM kills {kills}")
                    if status != 0 or kills != 0:
                        failures.append(f"{' '.join(args[1:3])} at {budget} B: exit {status}, OOM kills {kills}, "
                                        f"{err.strip()[-300:]}")
            finally:
                group.remove()
        if failures:
            sys.exit("a run inside a memory cgroup of its own budget failed:\n" + "\n".join(failures))


if __name__ == "__main__":
    if sys.argv[1:] == ["--cgroup"]:
        killed_by_the_kernel_at_its_own_budget()
    else:
        peak_under_budget()
