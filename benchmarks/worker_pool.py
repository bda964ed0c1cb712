"""Worker processes for the benchmarks' DeepGEMM warm-ups (deepgemm_bench.py, moe_bench.py): each runs in its
own process group, so that ending it at the deadline also ends the compilers (nvcc) it started."""
import os
import signal
import subprocess
import time


def start(argv, **popen_kwargs):
    """Popen(argv) in a new session (its own process group)."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


def wait_until(procs, deadline, tick=None, tick_s=30.0):
    """Waits for procs until time.time() reaches deadline, calling tick(done, total) every tick_s seconds; then
    kills the ones still running together with their process groups and reaps every process. Returns the
    killed ones."""
    last = time.time()
    while time.time() < deadline and any(p.poll() is None for p in procs):
        time.sleep(1.0)
        if tick is not None and time.time() - last >= tick_s:
            last = time.time()
            tick(sum(1 for p in procs if p.poll() is not None), len(procs))
    killed = [p for p in procs if p.poll() is None]
    for p in killed:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    return killed
