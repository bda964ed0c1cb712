"""The fast quotient of the CUDA activation quantization (include/act_quant.h: aq_quotient and its domain),
run on the CPU: it must give the fp8 codes of the fp32 IEEE quotient x / scale, for every bf16 and fp16 x.

act_quant_quotient_selftest.cpp holds the checks; this compiles it with the host C++ compiler (-O2, no
floating-point contraction) and turns each of its "ok <check>" lines into a test.
"""
import os

import pytest
from host_cxx import host_cxx
from selftest_lines import assert_check_passed, assert_ran_exactly, build_and_run

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "include")
SOURCE = os.path.join(HERE, "act_quant_quotient_selftest.cpp")
CHECKS = [
    "fast_path_domain",
    "fnuz_from_fn",
    "quotient_bf16_x",
    "quotient_fp16_x",
    "quotient_significands",
    "quotient_fp32_x",
]


@pytest.fixture(scope="module")
def selftest_output(tmp_path_factory):
    cxx = host_cxx()
    if cxx is None:
        pytest.fail("no C++ compiler found (set CXX); the quotient self-test needs one")
    exe = str(tmp_path_factory.mktemp("act_quant_quotient") / "selftest")
    cmd = [cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-pthread", "-I", INCLUDE,
           SOURCE, "-o", exe]
    return build_and_run(cmd, exe, SOURCE, run_timeout=600)


@pytest.mark.parametrize("check", CHECKS)
def test_act_quant_quotient(selftest_output, check):
    _, lines = selftest_output
    assert_check_passed(lines, check)


def test_selftest_runs_exactly_the_known_checks(selftest_output):
    returncode, lines = selftest_output
    assert_ran_exactly(returncode, lines, CHECKS)
