"""Building, running and asserting the C++ self-tests that print "ok <check>" or "FAIL <check>: <details>" per
check (shape_dispatch_selftest.cpp, sm90_dispatch_selftest.cu, act_quant_quotient_selftest.cpp): each check
becomes a test."""
import subprocess


def build_and_run(cmd, exe, what, run_timeout=120, env=None):
    """Compiles with `cmd` (which writes `exe`), runs `exe`: (return code, stdout lines)."""
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"building {what} failed:\n{build.stderr[-4000:]}"
    run = subprocess.run([exe], capture_output=True, text=True, timeout=run_timeout, env=env)
    return run.returncode, run.stdout.splitlines()


def assert_check_passed(lines, check):
    failures = [line for line in lines if line.startswith(f"FAIL {check}:")]
    assert not failures, failures[0]
    assert f"ok {check}" in lines, f"check {check} did not run; output:\n" + "\n".join(lines)


def assert_ran_exactly(returncode, lines, checks):
    assert returncode == 0, "\n".join(lines)
    assert sorted(line.split()[1].rstrip(":") for line in lines) == sorted(checks)
