# tests/compute/convert/kill_at_report.py: runs a `sluice convert` or `sluice
# synth` and SIGKILLs it the moment its stderr reports a given phase, so an
# interruption test stops the run at a point the run itself announced.
import signal
import subprocess


def kill_at_report(argv, report, env=None, timeout=180):
    """Runs `argv`, kills it on the first stderr line containing `report`.

    Returns True if it was killed there, False if it finished (or failed)
    without printing that line, which the caller treats as a missed point."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if report in line:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout)
                return True
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    if proc.returncode != 0:
        raise AssertionError(f"{argv} failed ({proc.returncode}) before reporting {report!r}:\n{''.join(seen)}")
    return False
