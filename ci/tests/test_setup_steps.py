"""ci/steps.sh, which ci/setup.sh, test.sh and demo.sh use: timed step lines, and the wait for a package lock
held by another apt/dpkg process (tried on a lock file of our own, held the way dpkg holds its lock)."""

import fcntl
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash(script, **env):
    base = {k: v for k, v in os.environ.items() if k != "STEP_LOG"}  # not into the summary of a make test running us
    return subprocess.run(["bash", "-c", f". {ROOT / 'ci' / 'steps.sh'}\n{script}"], capture_output=True, text=True,
                          timeout=120, env=dict(base, **env))


def test_step_prints_name_status_and_time():
    result = _bash('step demo "say hi" echo hi; step demo "fail" false; print_summary')
    lines = result.stdout.splitlines()
    assert lines[:3] == ["[demo] say hi", "hi", lines[2]] and lines[2].startswith("[demo] say hi: ok, ")
    assert lines[2].endswith(" s")
    assert lines[4].startswith("[demo] fail: FAILED (exit 1), ")
    assert lines[5].startswith("  ok") and lines[5].endswith("say hi") and lines[6].startswith("  FAILED")


def test_waits_for_a_held_package_lock_and_says_so(tmp_path):
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    fd = os.open(lock, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # dpkg's kind of lock (POSIX record lock)
    proc = subprocess.Popen(["bash", "-c", f". {ROOT / 'ci' / 'steps.sh'}\nwait_for_dpkg_lock && echo PROCEED"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, DPKG_LOCKS=str(lock)))
    time.sleep(3)
    assert proc.poll() is None, "must wait while the lock is held"
    os.close(fd)  # the other process finishes
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "another apt/dpkg process holds the package lock" in out and "waiting" in out
    assert "package lock released after" in out and out.rstrip().endswith("PROCEED")


def test_gives_up_after_the_limit(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    try:
        result = _bash("wait_for_dpkg_lock", DPKG_LOCKS=str(lock), DPKG_LOCK_WAIT="5")
    finally:
        os.close(fd)
    assert result.returncode == 1 and "still held after 5 s: giving up" in result.stdout


def test_free_lock_passes_at_once(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    result = _bash("wait_for_dpkg_lock && echo PROCEED", DPKG_LOCKS=str(lock))
    assert result.returncode == 0 and result.stdout == "PROCEED\n"


def test_steps_are_recorded_for_the_summary(tmp_path):
    # ci/test.sh's summary lists ci/setup.sh's steps too: each step appends its line to $STEP_LOG.
    log = tmp_path / "steps"
    result = _bash('step setup "one" true; step test "two" false; true', STEP_LOG=str(log))
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("  ok") and lines[0].endswith("[setup] one")
    assert lines[1].startswith("  FAILED") and lines[1].endswith("[test] two")


def test_a_long_step_says_it_is_still_running():
    result = _bash('step demo "slow" sleep 5', STEP_TICK_S="2")  # the tick is 25 s in CI
    lines = result.stdout.splitlines()
    assert lines[0] == "[demo] slow" and lines[1] == "  ... slow: running for 2 s", lines
    assert lines[2] == "  ... slow: running for 4 s" and lines[3].startswith("[demo] slow: ok, 5."), lines
