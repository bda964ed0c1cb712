#!/usr/bin/env bash
# One device call: build img2gray for CUDA, run its tests on the GPU, check the SASS, benchmark.
# Usage (device tool): bash benchmarks/run_img2gray_h200.sh   (writes under $OUT)
set -uo pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-build-isolation --no-deps -e img2gray 2>&1 | tail -3 | tee "$OUT/img2gray_build.log"
nvcc -gencode=arch=compute_90,code=sm_90 -O3 -std=c++17 -Xptxas -v -c img2gray/csrc/img2gray_cuda/img2gray.cu \
  -o /tmp/img2gray.o 2>&1 | grep -E "registers|spill" | tee -a "$OUT/img2gray_build.log"
cuobjdump --dump-sass /tmp/img2gray.o | grep -cE "LDG.E.128|LDG.E.ENL2.128" | sed 's/^/16-byte global loads in SASS: /' | tee -a "$OUT/img2gray_build.log"
python3 -m pytest img2gray/tests -q -p no:cacheprovider -x 2>&1 | tail -5 | tee "$OUT/img2gray_tests.log"
python3 benchmarks/img2gray_bench.py --out "$OUT"
