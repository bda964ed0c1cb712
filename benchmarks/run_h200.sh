#!/usr/bin/env bash
# One H200 device call: build the kernels for CUDA from this tree, run their GPU tests, run the
# benchmarks. Logs and results land in $OUT (the device tool brings them back).
#
#   bash benchmarks/run_h200.sh [publish-deps] [build] [img2gray] [test[=PYTEST_ARGS]] [bench[=GEMM_BENCH_ARGS]]
#                               [img2gray-bench] [deepgemm] [deepgemm-jit-out] [moe-bench[=ARGS]]
#                               [dg-bench[=DEEPGEMM_BENCH_ARGS]]
#
#   publish-deps    installs kernels, kernel-abi-check and tabulate (ci/requirements.txt's pins, which the
#                   publishing tests need) from wheels carried in .cache/device-wheels, filled beforehand by
#                   pip download kernels==0.17.2 kernel-abi-check==0.14.1 tabulate==0.10.0 --python-version 3.12 \
#                     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#                     --platform manylinux2014_x86_64 --only-binary=:all: -d .cache/device-wheels
#   build           pip build of gemm for CUDA (editable), log in build_gemm.log
#   img2gray        the same for img2gray
#   test=ARGS       pytest ARGS (default gemm/tests), log in pytest.log
#   bench=ARGS      benchmarks/gemm_bench.py ARGS -> gemm_h200.{json,md,png,log}
#   img2gray-bench  benchmarks/img2gray_bench.py -> img2gray_h200.{json,md,png}
#   deepgemm        unpacks .cache/deepgemm.tar.xz (benchmarks/pack_deepgemm.sh: a DeepGEMM checkout with the
#                   CUTLASS and {fmt} it pins; carried, never committed) to /tmp/DeepGEMM, builds its extension
#                   there (log in build_deepgemm.log) and exports PYTHONPATH / DG_JIT_CACHE_DIR for the later steps;
#                   a JIT cache carried as .cache/deepgemm-jit.tar.xz is unpacked into DG_JIT_CACHE_DIR first
#   deepgemm-jit-out  packs DG_JIT_CACHE_DIR into $OUT/deepgemm-jit.tar.xz (carry it back to skip recompiles)
#   moe-bench=ARGS  benchmarks/moe_bench.py ARGS -> moe_<gpu>.{json,md}; needs finegrained-fp8 v4's torch-ext
#                   package copied to .cache/finegrained_fp8_v4 (carried; never committed). With DeepGEMM:
#                   `deepgemm moe-bench=--deepgemm` (its kernels compile in parallel before the measurements;
#                   add deepgemm-jit-out after it to bring the JIT cache back); a subset: e.g.
#                   moe-bench="--deepgemm --models=Qwen3-30B-A3B --tokens=8,4096"
#   dg-bench=ARGS   benchmarks/deepgemm_bench.py ARGS -> deepgemm_<gpu>.{json,md}: ours, DeepGEMM, CUTLASS and torch
#                   in one process; after the deepgemm step (its PYTHONPATH / LD_PRELOAD / DG_JIT_CACHE_DIR), or it
#                   runs without DeepGEMM and says so
#
# The CUTLASS headers (build.toml: cutlass_4_4) travel with the call: carry .cache/cutlass-4.4.2, which
# ci/setup.sh (python tools/kbuild fetch-cutlass gemm) fills, and .cache/device-wheels for publish-deps;
# the machine has no network.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/h200_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$SECONDS
step() { echo "[$((SECONDS - t0)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader

for arg in "$@"; do
  case "$arg" in
    publish-deps)
      timeout 120 python3 -m pip install --no-index --find-links .cache/device-wheels \
        $(grep -E '^(kernels|kernel-abi-check|tabulate)==' ci/requirements.txt) > "$OUT/publish_deps.log" 2>&1
      step "publish deps rc=$?: $(tail -1 "$OUT/publish_deps.log" | cut -c1-200)" ;;
    build)
      MAX_JOBS=16 timeout 420 python3 -m pip install --no-build-isolation --no-deps -e gemm > "$OUT/build_gemm.log" 2>&1
      step "gemm build rc=$? ($(grep -c 'nvcc' "$OUT/build_gemm.log") nvcc lines)"
      tail -3 "$OUT/build_gemm.log" | cut -c1-300 ;;
    img2gray)
      MAX_JOBS=8 timeout 200 python3 -m pip install --no-build-isolation --no-deps -e img2gray > "$OUT/build_img2gray.log" 2>&1
      step "img2gray build rc=$?" ;;
    test=*|test)
      args="${arg#test}"; args="${args#=}"
      timeout 420 python3 -m pytest ${args:-gemm/tests} -q -p no:cacheprovider --maxfail=10 > "$OUT/pytest.log" 2>&1
      step "pytest rc=$?: $(tail -1 "$OUT/pytest.log")"
      grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -10 | cut -c1-300 ;;
    deepgemm)
      # DeepGEMM's extension, built against the same torch, segfaults on its first call unless the process
      # loads the system's newer libstdc++ before torch's.
      export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6 DG_JIT_CACHE_DIR=/tmp/deepgemm-jit
      export PYTHONPATH="/tmp/DeepGEMM${PYTHONPATH:+:$PYTHONPATH}"
      rm -rf /tmp/DeepGEMM && tar -xJf .cache/deepgemm.tar.xz -C /tmp
      mkdir -p "$DG_JIT_CACHE_DIR"
      [ -f .cache/deepgemm-jit.tar.xz ] && tar -xJf .cache/deepgemm-jit.tar.xz -C "$DG_JIT_CACHE_DIR"
      (cd /tmp/DeepGEMM && ln -sfn "$PWD/third-party/cutlass/include/cutlass" deep_gemm/include/cutlass &&
         ln -sfn "$PWD/third-party/cutlass/include/cute" deep_gemm/include/cute &&
         MAX_JOBS=16 timeout 400 python3 setup.py build_ext --inplace) > "$OUT/build_deepgemm.log" 2>&1
      step "deepgemm build rc=$?: $(python3 -c 'import deep_gemm; print(deep_gemm.__version__, deep_gemm.__file__)' 2>&1 | tail -1 | cut -c1-200)" ;;
    deepgemm-jit-out)
      tar -cJf "$OUT/deepgemm-jit.tar.xz" -C "$DG_JIT_CACHE_DIR" . && step "deepgemm jit cache: $(du -sh "$OUT/deepgemm-jit.tar.xz" | cut -f1)" ;;
    moe-bench=*|moe-bench)
      args="${arg#moe-bench}"; args="${args#=}"
      timeout 540 python3 benchmarks/moe_bench.py --v4 .cache/finegrained_fp8_v4 --out "$OUT" ${args} \
        > "$OUT/moe_bench_stdout.log" 2>&1
      step "moe_bench rc=$?"
      tail -4 "$OUT/moe_bench_stdout.log" | cut -c1-300 ;;
    img2gray-bench)
      timeout 300 python3 benchmarks/img2gray_bench.py --out "$OUT" > "$OUT/img2gray_bench_stdout.log" 2>&1
      step "img2gray_bench rc=$?"
      tail -8 "$OUT/img2gray_bench_stdout.log" | cut -c1-250 ;;
    dg-bench=*|dg-bench)
      args="${arg#dg-bench}"; args="${args#=}"
      timeout 560 python3 benchmarks/deepgemm_bench.py --out "$OUT" ${args} > "$OUT/deepgemm_bench_stdout.log" 2>&1
      step "deepgemm_bench rc=$?"
      tail -12 "$OUT/deepgemm_bench_stdout.log" | cut -c1-250 ;;
    bench=*|bench)
      args="${arg#bench}"; args="${args#=}"
      timeout 540 python3 benchmarks/gemm_bench.py --out "$OUT" ${args} > "$OUT/bench_stdout.log" 2>&1
      step "gemm_bench rc=$?"
      tail -25 "$OUT/bench_stdout.log" | cut -c1-250 ;;
  esac
done
step done
