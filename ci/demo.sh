#!/usr/bin/env bash
# The main job: set up, build, then run each kernel's demo on the fastest backend available.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/steps.sh
. ci/steps.sh
bash ci/setup.sh
step demo "img2gray demo (writes demo-output/)" $PYTHON img2gray/examples/demo.py --out-dir demo-output
if [ -f gemm/examples/demo.py ]; then step demo "gemm demo" $PYTHON gemm/examples/demo.py; fi
