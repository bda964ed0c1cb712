"""Unit tests of the GPU backends' shape dispatch (include/gemm_shape_dispatch.h), run on the CPU.

shape_dispatch_selftest.cpp holds the checks (and static_asserts); this compiles it with the host
C++ compiler and turns each of its "ok <check>" lines into a test.
"""
import os

import pytest
from host_cxx import host_cxx
from selftest_lines import assert_check_passed, assert_ran_exactly, build_and_run

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "include")
SOURCE = os.path.join(HERE, "shape_dispatch_selftest.cpp")
CHECKS = [
    "injective_on_edge_values",
    "hub_aliasing_cases",
    "unpackable_shapes_never_match",
    "lookup_hits",
    "lookup_misses",
    "tuned_keys_unique",
]


def _compiler():
    cxx = host_cxx()
    if cxx:
        return cxx
    pytest.fail("no C++ compiler found (set CXX); the shape-dispatch tests need one")


@pytest.fixture(scope="module")
def selftest_output(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("shape_dispatch") / "selftest")
    cmd = [_compiler(), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE, SOURCE, "-o", exe]
    return build_and_run(cmd, exe, SOURCE)


@pytest.mark.parametrize("check", CHECKS)
def test_shape_dispatch(selftest_output, check):
    _, lines = selftest_output
    assert_check_passed(lines, check)


def test_selftest_runs_exactly_the_known_checks(selftest_output):
    returncode, lines = selftest_output
    assert_ran_exactly(returncode, lines, CHECKS)
