#!/usr/bin/env bash
# Set up a fresh Debian 12 / Ubuntu 24.04 machine (or re-check an existing one) for everything the README runs:
# system toolchains, the project's Python environment (.venv, see ci/steps.sh) and its packages, CUDA 13.0's and
# 13.2's nvcc, the `kernels` release of kernel-builder's pinned API and the CUTLASS headers kernel-builder uses (all
# from PyPI, into .cache/), then the editable builds of every kernel.
# Idempotent: what is already there is not reinstalled, and a kernel whose sources, flags and toolchain
# are unchanged since its last build is not rebuilt. Set SKIP_APT=1 to skip the Debian packages.
# SETUP_ONLY=python stops after the Python packages, SETUP_REQUIREMENTS names another requirements file
# (ci/tests/test_setup_python.py runs the Python part under an externally managed Python that way).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/steps.sh
. ci/steps.sh

# clang/lld/llvm 19 + clang-offload-bundler (clang-tools-19) + HIP headers + ROCm device libs: compile
# the HIP code for gfx942 (CI only compiles it); nix-bin: `nix-instantiate --parse` checks every flake.nix;
# python3-venv: Debian's python3 has no venv/ensurepip without it.
APT_PACKAGES=(clang-19 clang-tools-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs nix-bin python3-venv)

apt_packages() {
  if [ "${SKIP_APT:-0}" = 1 ] || ! command -v apt-get >/dev/null; then
    echo "  skipped (SKIP_APT=1 or no apt-get)"
    return 0
  fi
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "  all installed: ${APT_PACKAGES[*]}"
    return 0
  fi
  local sudo
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  wait_for_dpkg_lock
  echo "  installing ${missing[*]}"
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

BASE_PYTHON=${BASE_PYTHON:-python3}
REQUIREMENTS=${SETUP_REQUIREMENTS:-ci/requirements.txt}

# The project's virtual environment (ci/steps.sh: $PYTHON is $VENV_DIR/bin/python unless PYTHON was set).
# --system-site-packages: a torch already installed in the base Python (a CUDA or ROCm build) is kept.
python_environment() {
  if [ "$PYTHON" != "$VENV_DIR/bin/python" ]; then
    echo "  using PYTHON=$PYTHON (set by you; no virtual environment made)"
    return 0
  fi
  if [ -x "$PYTHON" ] && "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "  $VENV_DIR exists ($("$PYTHON" --version 2>&1))"
    return 0
  fi
  echo "  creating $VENV_DIR: $BASE_PYTHON -m venv --system-site-packages ($($BASE_PYTHON --version 2>&1))"
  rm -rf "$VENV_DIR"
  if ! $BASE_PYTHON -m venv --system-site-packages "$VENV_DIR"; then
    echo "  $BASE_PYTHON cannot make a virtual environment: on Debian/Ubuntu install python3-venv" \
      "(apt-get install python3-venv; ci/setup.sh does it unless SKIP_APT=1), or set BASE_PYTHON or PYTHON"
    rm -rf "$VENV_DIR"
    return 1
  fi
}

python_packages() {
  local reqs status log
  reqs=$(mktemp)
  if $PYTHON -c "import torch" 2>/dev/null; then
    # Keep an already installed torch (e.g. a CUDA build on a GPU machine); install the rest.
    grep -v '^torch==' "$REQUIREMENTS" > "$reqs"
  else
    cp "$REQUIREMENTS" "$reqs"
  fi
  if $PYTHON - "$reqs" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    from packaging.requirements import Requirement
except ImportError:  # a fresh venv has only pip, which vendors it
    from pip._vendor.packaging.requirements import Requirement

for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        req = Requirement(line)
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
EOF
  then
    echo "  all installed ($REQUIREMENTS)"
  else
    # One line per package here; pip's whole output in the log, and its end here when pip fails.
    mkdir -p .cache
    log=.cache/pip-install.log
    set +o pipefail
    $PYTHON -m pip install --progress-bar off -r "$reqs" 2>&1 | tee "$log" |
      grep -E --line-buffered '^(Collecting|Installing|Successfully)' | sed -u 's/^/  /'
    status=${PIPESTATUS[0]}
    set -o pipefail
    rm -f "$reqs"
    if [ "$status" -ne 0 ]; then
      echo "  pip failed (exit $status); its output (all of it in $log):"
      tail -40 "$log" | sed 's/^/    /'
    fi
    return "$status"
  fi
  rm -f "$reqs"
}

# kbuild's own lines of a pip build, once each (pip runs setup.py more than once: the "staged in" line repeats).
kbuild_lines() {
  local line staged=
  while IFS= read -r line; do
    case "$line" in
      *"kbuild: "*)
        line="kbuild: ${line#*kbuild: }"
        if [[ $line == *" staged in "* ]]; then
          [ -n "$staged" ] && continue
          staged=1
        fi
        echo "  $line" ;;
      *"ninja: no work to do"*) echo "  ninja: no work to do." ;;
    esac
  done
}

build_kernel() {
  local kernel=$1 why log status
  if why=$($PYTHON tools/kbuild up-to-date "$kernel" 2>&1); then
    echo "  up to date, not rebuilt: sources, flags and toolchain unchanged since the last build ($why)"
    return 0
  fi
  echo "  building ($why): pip install --no-build-isolation --no-deps -e $kernel (log: $kernel/_build/pip-install.log)"
  mkdir -p "$kernel/_build"
  log="$kernel/_build/pip-install.log"
  # The full pip/compiler output goes to the log; kbuild's lines (one per compiled file, as it starts) here.
  set +o pipefail
  $PYTHON -m pip install -v --no-build-isolation --no-deps -e "$kernel" 2>&1 | tee "$log" | kbuild_lines
  status=${PIPESTATUS[0]}
  set -o pipefail
  if [ "$status" -ne 0 ]; then
    echo "  FAILED (exit $status); the end of $log:"
    grep -v 'is ignored: it is neither a file' "$log" | tail -40 | sed 's/^/    /'
    return "$status"
  fi
  $PYTHON tools/kbuild up-to-date "$kernel" >/dev/null || { echo "  built, but the editable install is not importable"; return 1; }
}

export MAX_JOBS=${MAX_JOBS:-$(nproc)}
step setup "Debian packages" apt_packages
step setup "Python environment (.venv)" python_environment
step setup "Python packages" python_packages
if [ "${SETUP_ONLY:-}" = python ]; then exit 0; fi
step setup "nvcc (CUDA 13.0, PyPI)" $PYTHON tools/kbuild install-nvcc
step setup "nvcc (CUDA 13.2, PyPI)" $PYTHON tools/kbuild install-nvcc --cuda 13.2
step setup "kernels 0.16.0 (the kernels API at kernel-builder's pin, PyPI)" $PYTHON tools/kbuild install-pinned-kernels
step setup "CUTLASS headers (build.toml depends)" $PYTHON tools/kbuild fetch-cutlass img2gray gemm
for kernel in img2gray gemm; do
  [ -f "$kernel/setup.py" ] || continue
  step setup "build $kernel (editable)" build_kernel "$kernel"
done
