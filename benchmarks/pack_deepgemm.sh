#!/usr/bin/env bash
# Packs a DeepGEMM checkout with its submodules (CUTLASS, {fmt}) into .cache/deepgemm.tar.xz, the archive
# run_h200.sh's `deepgemm` step builds on the device (which has no network). Never committed.
#
#   git clone --recursive https://github.com/deepseek-ai/DeepGEMM /tmp/DeepGEMM   # 2.6.1: commit 54e2261
#   bash benchmarks/pack_deepgemm.sh /tmp/DeepGEMM      # DG_COMMIT=<sha> names the commit of a tree without .git
#
# Only what the build and the JIT read travels: the sources, CUTLASS's and {fmt}'s include/ trees.
set -euo pipefail
src=$(realpath "$1")
cd "$(dirname "$0")/.."
for f in setup.py deep_gemm/__init__.py third-party/cutlass/include/cutlass/version.h third-party/fmt/include/fmt/format.h; do
  [ -f "$src/$f" ] || { echo "pack_deepgemm: $src/$f is missing (a --recursive checkout of DeepGEMM?)" >&2; exit 1; }
done
mkdir -p .cache
# The source commit travels in the archive (DEEPGEMM_COMMIT): deepgemm_bench.py records it.
commit=${DG_COMMIT:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)}
echo "$commit" > "$src/DEEPGEMM_COMMIT"
tar -cJf .cache/deepgemm.tar.xz -C "$(dirname "$src")" --transform "s,^$(basename "$src"),DeepGEMM," \
  --exclude=.git --exclude="$(basename "$src")/third-party/cutlass/[!i]*" --exclude="$(basename "$src")/third-party/fmt/[!i]*" \
  --exclude="$(basename "$src")/third-party/tilelang_ops" "$(basename "$src")"
rm -f "$src/DEEPGEMM_COMMIT"
echo "$(du -h .cache/deepgemm.tar.xz | cut -f1) .cache/deepgemm.tar.xz: DeepGEMM $(grep -oP "__version__ = '\K[^']+" "$src/deep_gemm/__init__.py") at $commit"
