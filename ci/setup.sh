#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (or re-check an existing one) for everything the README runs:
# system toolchains, Python packages, then the editable builds of every kernel.
# Idempotent: what is already there is not reinstalled. Set SKIP_APT=1 to skip the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang/lld/llvm 19 + HIP headers + ROCm device libs: compile the HIP code for gfx942 (CI only compiles it);
# nix-bin: `nix-instantiate --parse` checks every flake.nix.
APT_PACKAGES=(clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs nix-bin)
if [ "${SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

PYTHON=${PYTHON:-python3}
if ! $PYTHON -c "import torch" 2>/dev/null; then
  $PYTHON -m pip install -q -r ci/requirements.txt
else
  # Keep an already installed torch (e.g. a CUDA build on a GPU machine); install the rest.
  grep -v '^torch==' ci/requirements.txt | $PYTHON -m pip install -q -r /dev/stdin
fi

export MAX_JOBS=${MAX_JOBS:-$(nproc)}
for kernel in img2gray gemm; do
  [ -f "$kernel/setup.py" ] || continue
  echo "setup: building $kernel (pip install --no-build-isolation -e $kernel)"
  $PYTHON -m pip install -q --no-build-isolation --no-deps -e "$kernel"
done
