"""Host-only tests of the sm90 backend's dispatch rules and work-split plans, no GPU needed.

sm90_dispatch_selftest.cu holds the checks; this builds it with nvcc together with
gemm_cuda/gemm_cuda.cu (the launcher; the kernels stubbed) and turns each "ok <check>" line into a
test. Skipped only where nvcc is not installed (the CI machine has it).
"""
import os
import shutil

import pytest
from selftest_lines import assert_check_passed, assert_ran_exactly, build_and_run

HERE = os.path.dirname(os.path.abspath(__file__))
GEMM = os.path.dirname(HERE)
CHECKS = ["generic_rule_matches_table_on_192x128", "generic_rule_matches_table_on_192x144",
          "generic_rule_matches_table_on_256x128", "generic_rule_examples",
          "generic_rule_on_deepgemm_shapes", "decode_plan", "split_k_tail"]


def _nvcc():
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.exists(cand):
            return cand
    pytest.skip("nvcc not installed")


@pytest.fixture(scope="module")
def selftest_output(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("sm90_dispatch") / "selftest")
    cmd = [_nvcc(), "-std=c++17", "-O1", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
           "-I", os.path.join(GEMM, "include"), "-I", os.path.join(GEMM, "gemm_cuda"),
           os.path.join(HERE, "sm90_dispatch_selftest.cu"), os.path.join(GEMM, "gemm_cuda", "gemm_cuda.cu"),
           "-o", exe]
    # No GPU is needed: the SM count falls back to the H200's 132 when no device answers, and the
    # tests pin it so a machine with a different GPU gives the same answers.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("GEMM_CUDA_CONFIG", None)
    env.pop("GEMM_CUDA_EXACT_ACCUMULATION", None)
    return build_and_run(cmd, exe, "the sm90 dispatch self-test", env=env)


@pytest.mark.parametrize("check", CHECKS)
def test_sm90_dispatch(selftest_output, check):
    _, lines = selftest_output
    assert_check_passed(lines, check)


def test_selftest_runs_exactly_the_known_checks(selftest_output):
    returncode, lines = selftest_output
    assert_ran_exactly(returncode, lines, CHECKS)
