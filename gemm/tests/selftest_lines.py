"""Shared assertions for the C++ self-tests that print "ok <check>" or "FAIL <check>: <details>" per check
(shape_dispatch_selftest.cpp, sm90_dispatch_selftest.cu, act_quant_quotient_selftest.cpp): each check becomes
a test."""


def assert_check_passed(lines, check):
    failures = [line for line in lines if line.startswith(f"FAIL {check}:")]
    assert not failures, failures[0]
    assert f"ok {check}" in lines, f"check {check} did not run; output:\n" + "\n".join(lines)


def assert_ran_exactly(returncode, lines, checks):
    assert returncode == 0, "\n".join(lines)
    assert sorted(line.split()[1].rstrip(":") for line in lines) == sorted(checks)
