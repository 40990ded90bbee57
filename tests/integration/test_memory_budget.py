#!/usr/bin/python3
# The memory budget holds for a whole `sluice run`: on a container whose
# experts are larger than the budget, the process's peak RSS stays under the
# budget (plus the RSS of a sluice that only prints its version: code and
# libraries the plan does not count), while the cache really is under
# pressure. A budget under the floor is refused with the plan.
import json
import os
import subprocess
import sys
import tempfile

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


def main():
    with tempfile.TemporaryDirectory(prefix="sluice-budget-") as work:
        checkpoint, model = os.path.join(work, "ck"), os.path.join(work, "m.sluice")
        run("/usr/bin/python3", os.path.join(ROOT, "scripts/make_tiny_checkpoint.py"), "olmoe", checkpoint,
            "--seed", "3", "--set", "hidden_size=512", "--set", "intermediate_size=512", "--set", "num_experts=64",
            "--set", "num_hidden_layers=4", "--set", "num_experts_per_tok=8")
        run(SLUICE, "convert", checkpoint, model, "-q")
        plan = json.loads(run(SLUICE, "plan", model, "--json"))
        budget = plan["floor_bytes"] + plan["working_set_bytes"]
        info = json.loads(run(SLUICE, "info", model, "--json"))
        expert_bytes = info["expert_bytes"]
        if not expert_bytes > budget:
            sys.exit(f"test container too small: experts {expert_bytes} B fit the budget {budget} B")

        _, _, baseline = peak_rss_bytes(SLUICE, "--version")
        status, out, peak = peak_rss_bytes(SLUICE, "run", model, "--prompt-ids", "1,2,3,4,5,6,7,8,9,10,11,12",
                                           "-n", "48", "--budget", str(budget), "--json")
        if status != 0:
            sys.exit(f"sluice run --budget {budget} failed with status {status}")
        experts = json.loads(out)["experts"]
        print(f"budget {budget} B, peak RSS {peak} B (baseline {baseline} B), experts {expert_bytes} B, "
              f"requested {experts['requested']}, hits {experts['hits']}, reads {experts['reads']}")
        if not peak <= budget + baseline:
            sys.exit(f"peak RSS {peak} B exceeds the budget {budget} B plus the baseline {baseline} B")
        if not experts["reads"] > 0 or not experts["hits"] < experts["requested"]:
            sys.exit(f"the cache was never under pressure: {experts}")

        refused = subprocess.run([SLUICE, "run", model, "--prompt-ids", "1,2", "-n", "1", "--budget",
                                  str(plan["floor_bytes"] - 1)], capture_output=True, text=True)
        if refused.returncode == 0 or "under the floor" not in refused.stderr:
            sys.exit(f"a budget under the floor was not refused with the plan: {refused.stderr}")


if __name__ == "__main__":
    main()
