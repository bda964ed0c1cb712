#!/usr/bin/env bash
# Everything CI runs: set up, then for each kernel kernels-community's CI test run (the kernels_ci smoke
# tests against a build variant made by tools/kbuild, loaded through LOCAL_KERNELS as `nix run .#ci-test`
# does) and its own test suite (each kernel dir stands alone, so each runs in its own pytest session),
# then the repository-level checks (builds for sm_90a/gfx942, the staged build rules, flakes).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/steps.sh
. ci/steps.sh
start=$EPOCHREALTIME
# The summary at the end lists every step, ci/setup.sh's included.
STEP_LOG=$(mktemp)
export STEP_LOG
trap 'rm -f "$STEP_LOG"' EXIT
summary() {
  echo "[test] summary"
  cat "$STEP_LOG"
  echo "[test] total $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s (set-up included)"
}
if ! bash ci/setup.sh; then
  summary
  exit 1
fi
# pytest prints a line per test file (start, end, counts, time) and at least one every 20 s (ci/pytest_progress.py).
PYTEST=(env "PYTHONPATH=$PWD/ci${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pytest -q -p no:cacheprovider
        -p pytest_progress -o console_output_style=classic)

# In CI every toolchain is installed by ci/setup.sh: a compile check must fail, not skip, when one is missing.
export FP8GEMM_REQUIRE_HIP=1 CI_REQUIRE_NVCC=1
# AMD's matrix instruction calculator output for the emulator's lane-table cross-check, where the
# project's shared research folder sits beside the repository (it is not part of any kernel dir).
if [ -z "${FP8GEMM_AMD_MFMA_DIR:-}" ] && [ -d ../shared/amd_mfma ]; then
  export FP8GEMM_AMD_MFMA_DIR="$(cd ../shared/amd_mfma && pwd)"
fi

status=0
for kernel in img2gray gemm; do
  [ -d "$kernel/tests" ] || continue
  # The variant is built first: the suites' own variant builds then find it compiled already.
  step test "$kernel: kernels_ci smoke tests on its build variant (tools/kbuild ci-test)" \
    $PYTHON tools/kbuild ci-test "$kernel" --require-tests -- -q || status=1
  step test "$kernel: pytest $kernel/tests" "${PYTEST[@]}" "$kernel/tests" || status=1
done
step test "pytest ci/tests" "${PYTEST[@]}" ci/tests || status=1

summary
exit $status
