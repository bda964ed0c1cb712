#!/usr/bin/env bash
# Publishing on the H200 (issue 6), one device call: build the CUDA (and CPU) build variants of each kernel with
# `python3 tools/kbuild variant`, ABI-check them, load them offline with kernels.get_local_kernel, run the CUDA
# ops on GPU tensors against the CPU variant and an independent reference, kernelize the layers on CUDA, run
# `kernels benchmark` on the local build, and (img2gray) install the CUDA wheel into a fresh venv.
#
# Usage (repository root, GPU machine, no network):
#   bash benchmarks/run_publish_h200.sh [img2gray] [gemm]        # default: both; logs under $OUT
# gemm's CUDA variant compiles CUTLASS kernels: under a 10-minute limit per call, run one kernel per call.
# Needs python3 + CUDA torch + nvcc. If `kernels`, `tabulate` or `kernel_abi_check` are missing they are installed
# from .carry/publish_wheels (carry it: `pip download kernels==0.17.2 tabulate==0.10.0 kernel-abi-check==0.14.1
# --python-version 3.12 --only-binary=:all: -d .carry/publish_wheels`). CUTLASS headers for gemm come from
# $CUTLASS_INCLUDE_DIR, .carry/cutlass, or the nvidia-cutlass package.
# Prints one "PASS <step>" / "FAIL <step>" line per step and a summary; every step has a timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/publish_h200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MAX_JOBS=${MAX_JOBS:-16}
KERNELS=("$@")
[ ${#KERNELS[@]} -gt 0 ] || KERNELS=(img2gray gemm)
T0=$SECONDS
pass=0
fail=0
failed=()

# step NAME TIMEOUT_S CMD...: run with a timeout, log to $OUT/NAME.log, print PASS/FAIL and the log's tail on failure.
step() {
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS $name ($((SECONDS - t)) s)"
  else
    fail=$((fail + 1)); failed+=("$name")
    [ $rc -eq 124 ] && echo "FAIL $name (timed out after $limit s)" || echo "FAIL $name (rc=$rc, $((SECONDS - t)) s)"
    tail -25 "$OUT/$name.log" | cut -c1-400 | sed 's/^/    /'
  fi
  return $rc
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
  nvcc --version 2>&1 | tail -1
  ldd --version 2>&1 | head -1
  c++ --version 2>&1 | head -1
} | tee "$OUT/environment.txt"

if ! python3 -c "import kernels, tabulate, kernel_abi_check" 2>/dev/null; then
  step install_publish_deps 180 python3 -m pip install --no-index --find-links .carry/publish_wheels \
    kernels==0.17.2 tabulate==0.10.0 kernel-abi-check==0.14.1
fi
python3 -c "import kernels, kernel_abi_check; print('kernels', kernels.__version__)" 2>&1 | tee -a "$OUT/environment.txt"

if [ -z "${CUTLASS_INCLUDE_DIR:-}" ] && [ -d .carry/cutlass/cutlass ]; then export CUTLASS_INCLUDE_DIR=$PWD/.carry/cutlass; fi

# ---------------------------------------------------------------------------------------------- checks (Python)
cat > /tmp/publish_check.py <<'PY'
"""Load both variants of one kernel offline and compare the CUDA op with the CPU variant and a reference."""
import json
import math
import os
import sys
from pathlib import Path

import torch

kernel = sys.argv[1]
root = Path(kernel).resolve()
assert os.environ.get("HF_HUB_OFFLINE") == "1"
import kernels
from kernels._rust import Backend, Digest, DigestAlgorithm, Metadata

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


for meta_path in sorted(root.glob("build/*/metadata.json")):
    meta = Metadata.read_from_file(str(meta_path))
    meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, str(meta_path.parent)))
    print(f"{meta_path.parent.name}: id={meta.id} backend={meta.backend.backend_type} archs={meta.backend.archs}")

gpu = kernels.get_local_kernel(root)  # the CUDA variant on a CUDA torch
cpu = kernels.get_local_kernel(root, backend="cpu")
major, minor = torch.__version__.split("+")[0].split(".")[:2]
cu = "".join(torch.version.cuda.split(".")[:2])
check(Path(gpu.__file__).parent.name == f"torch{major}{minor}-cxx11-cu{cu}-x86_64-linux", f"CUDA variant loaded: {gpu.__file__}")
check(gpu.__name__.startswith(f"_{kernel}_cuda_") and cpu.__name__.startswith(f"_{kernel}_cpu_"), f"ids {gpu.__name__} {cpu.__name__}")
gmeta = json.loads((Path(gpu.__file__).parent / "metadata.json").read_text())
check(gmeta["backend"]["type"] == "cuda" and any(a.startswith("9.0") for a in gmeta["backend"]["archs"]),
      f"CUDA metadata backend {gmeta['backend']}")
dev = torch.device("cuda")

if kernel == "img2gray":
    import numpy as np

    def reference(image):
        rgb = image.cpu().numpy().astype(np.float32)
        return torch.from_numpy(((np.float32(0.21) * rgb[..., 0] + np.float32(0.72) * rgb[..., 1]) + np.float32(0.07) * rgb[..., 2]).astype(np.uint8))

    g = torch.Generator().manual_seed(0)
    for shape in [(1, 1), (7, 13), (1080, 1920), (2161, 3839), (4, 719, 1281)]:
        image = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=g)
        want = reference(image)
        for layout, x in [("hwc", image.to(dev)), ("chw-view", image.movedim(-1, -3).contiguous().to(dev).movedim(-3, -1))]:
            out = torch.full(x.shape[:-1], 0xA5, dtype=torch.uint8, device=dev)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):  # the op must follow the current stream
                gpu.img2gray(x, out=out)
            stream.synchronize()
            check(torch.equal(out.cpu(), want) and torch.equal(out.cpu(), cpu.img2gray(x.cpu())), f"img2gray {shape} {layout}")
    try:
        gpu.img2gray(torch.zeros(4, 4, 4, dtype=torch.uint8, device=dev))
        check(False, "RGBA rejected")
    except RuntimeError as e:
        check("3 channels" in str(e), f"RGBA rejected: {str(e)[:120]}")
    # the layer through kernelize, on CUDA
    from torch import nn
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    @use_kernel_forward_from_hub("Grayscale")
    class ToGray(nn.Module):
        def forward(self, image):
            return reference(image).to(image.device)

    model = nn.Sequential(ToGray())
    with use_kernel_mapping({"Grayscale": {"cuda": LocalLayerRepository(repo_path=root, layer_name="Grayscale")}}):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cuda", use_fallback=False)
    x = torch.randint(0, 256, (3, 480, 641, 3), dtype=torch.uint8, device=dev)
    check("_img2gray_cuda_" in model[0].forward.__func__.__module__, f"layer forward from {model[0].forward.__func__.__module__}")
    check(torch.equal(model(x).cpu(), reference(x)), "Grayscale layer (kernelize, cuda)")
    compiled = torch.compile(model, fullgraph=True)
    check(torch.equal(compiled(x).cpu(), reference(x)), "Grayscale layer under torch.compile(fullgraph=True)")
else:
    sys.path.insert(0, str(root / "tests"))
    from reference import assert_close_challenge, make_inputs, poisoned_out, reference_gemm

    cases = [(1, 1, 1), (64, 64, 128), (64, 576, 7168), (96, 7168, 256), (128, 512, 7168), (1024, 1536, 7168), (33, 130, 300)]
    for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        for layout in ("mn_major", "k_major"):
            for i, (m, n, k) in enumerate(cases):
                if dtype == torch.float8_e4m3fnuz and m * n * k > 1e8:
                    continue
                a, b, sa, sb = make_inputs(m, n, k, dtype=dtype, layout=layout, seed=10 + i, device="cuda")
                out = poisoned_out(m, n, device="cuda")
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    gpu.gemm(a, b, sa, sb, out=out)
                stream.synchronize()
                what = f"gemm {m}x{n}x{k} {dtype} {layout}"
                try:
                    ref = reference_gemm(a, b, sa, sb)
                    # the CPU variant is exact: the challenge bound itself
                    assert_close_challenge(cpu.gemm(a.cpu(), b.cpu(), sa.cpu(), sb.cpu()), ref)
                    # the CUDA fp8 tensor-core path: challenge bound + 2^-12 * sum|terms| (gemm/docs/cuda_sm90.md,
                    # "Accuracy"; the bound of tests/test_gemm_cuda.py::assert_close_fp8_tensor_core)
                    mass = reference_gemm(a.float().abs().to(dtype), b.float().abs().to(dtype), sa.abs(), sb.abs())
                    got = out.cpu().double()
                    assert torch.equal(torch.isnan(got), torch.isnan(ref)), "NaN positions differ"
                    keep = ~torch.isnan(ref)
                    excess = ((got - ref).abs() - (1e-3 + 2e-2 * ref.abs() + 2.0 ** -12 * mass))[keep]
                    assert not (excess > 0).any(), f"{int((excess > 0).sum())} elements outside the bound, worst {float(excess.max()):.3g}"
                    check(True, what)
                except AssertionError as e:
                    check(False, what + ": " + str(e).splitlines()[0][:200])
    try:
        gpu.gemm(torch.zeros(4, 4, device=dev), torch.zeros(4, 4, device=dev), torch.ones(4, 1, device=dev), torch.ones(1, 1, device=dev))
        check(False, "float32 input rejected")
    except (RuntimeError, ValueError, TypeError) as e:
        check("float8" in str(e), f"float32 input rejected: {str(e)[:120]}")
    from torch import nn
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    @use_kernel_forward_from_hub("Fp8BlockLinear")
    class Fp8Linear(nn.Module):
        def __init__(self, weight, weight_scale_inv, bias):
            super().__init__()
            self.weight = nn.Parameter(weight, requires_grad=False)
            self.weight_scale_inv = nn.Parameter(weight_scale_inv, requires_grad=False)
            self.bias = nn.Parameter(bias, requires_grad=False)

        def forward(self, input):
            n, k = self.weight.shape
            scale = self.weight_scale_inv.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
            return (input.float() @ (self.weight.float() * scale).T + self.bias).to(input.dtype)

    torch.manual_seed(0)
    n, k = 1536, 7168
    w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
    ws = torch.rand(math.ceil(n / 128), math.ceil(k / 128), device=dev) * 0.02 + 0.01
    model = nn.Sequential(Fp8Linear(w, ws, torch.randn(n, device=dev) * 0.1))
    x = torch.randn(4, 64, k, dtype=torch.bfloat16, device=dev)
    slow = model(x)
    with use_kernel_mapping({"Fp8BlockLinear": {"cuda": LocalLayerRepository(repo_path=root, layer_name="Fp8BlockLinear")}}):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cuda", use_fallback=False)
    fast = model(x)
    err = ((fast.float() - slow.float()).norm() / slow.float().norm()).item()
    check("_gemm_cuda_" in model[0].forward.__func__.__module__ and err < 0.05, f"Fp8BlockLinear layer (kernelize, cuda): rel err {err:.4f}")
    compiled = torch.compile(model, fullgraph=True)
    # inductor may round the activation scales differently from eager: compare numerically, not bitwise
    cerr = ((compiled(x).float() - fast.float()).norm() / fast.float().norm()).item()
    check(cerr < 0.02, f"Fp8BlockLinear under torch.compile(fullgraph=True): rel diff to eager {cerr:.4f}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
PY

# ---------------------------------------------------------------------------------------------- per kernel
for k in "${KERNELS[@]}"; do
  echo "=== $k ($((SECONDS - T0)) s)"
  case $k in img2gray) cuda_limit=300 ;; *) cuda_limit=480 ;; esac
  step "${k}_variant_cpu" 300 env KBUILD_BACKEND=cpu python3 tools/kbuild variant "$k"
  step "${k}_variant_cuda" $cuda_limit env KBUILD_BACKEND=cuda python3 tools/kbuild variant "$k"
  grep -h "ABI" "$OUT/${k}_variant_cpu.log" "$OUT/${k}_variant_cuda.log" | sed 's/^/    /'
  mkdir -p "$OUT/$k"
  for m in "$k"/build/*/metadata.json; do [ -f "$m" ] && cp "$m" "$OUT/$k/$(basename "$(dirname "$m")").metadata.json"; done
  (cd "$k" && find build -type f | sort) > "$OUT/$k/build_files.txt" 2>&1
  if ls "$k"/build/*cu*/metadata.json >/dev/null 2>&1; then
    # kernel-builder's sandbox imports every variant without a GPU: so must the CUDA variant
    step "${k}_cuda_variant_imports_without_gpu" 120 env CUDA_VISIBLE_DEVICES= python3 -c "
import sys, torch
from pathlib import Path
from kernels import get_local_kernel
assert not torch.cuda.is_available()
m = get_local_kernel(Path('$k'))
assert Path(m.__file__).parent.name.split('-')[2].startswith('cu'), m.__file__
print('imported', m.__name__, 'from', m.__file__, 'without a GPU')"
    step "${k}_load_and_run_offline" 300 python3 /tmp/publish_check.py "$k"
    step "${k}_kernels_benchmark" 300 kernels benchmark "./$k" --iterations 100 --warmup 10 --output "$OUT/${k}_kernels_benchmark.json"
    grep -E "│|faster" "$OUT/${k}_kernels_benchmark.log" | sed 's/^/    /'
  fi
  step "${k}_upload_dry_run" 60 python3 tools/kbuild upload "$k" --dry-run
done

# img2gray's CUDA wheel (the variant's objects are reused), installed into a fresh venv, run on the GPU.
if [[ " ${KERNELS[*]} " == *" img2gray "* ]]; then
  rm -rf /tmp/publish_wheel /tmp/publish_venv
  if step img2gray_wheel_cuda 300 env KBUILD_BACKEND=cuda python3 tools/kbuild wheel img2gray --out /tmp/publish_wheel; then
    ls /tmp/publish_wheel/*.whl | tee -a "$OUT/img2gray_wheel_cuda.log"
    python3 -m venv --without-pip --system-site-packages /tmp/publish_venv
    step img2gray_wheel_install_run 120 bash -c '
      /tmp/publish_venv/bin/python -m pip install -q --no-deps --no-index /tmp/publish_wheel/*.whl &&
      cd /tmp && /tmp/publish_venv/bin/python -c "
import torch, img2gray
assert img2gray.__file__.startswith(\"/tmp/publish_venv\"), img2gray.__file__
x = torch.randint(0, 256, (1080, 1920, 3), dtype=torch.uint8, device=\"cuda\")
r = x.float()
want = ((r[..., 0] * 0.21 + r[..., 1] * 0.72) + r[..., 2] * 0.07).trunc().to(torch.uint8)
assert torch.equal(img2gray.img2gray(x), want)
print(\"wheel OK\", img2gray.__file__, img2gray.ops)"'
  fi
fi

echo "=== summary: $pass passed, $fail failed in $((SECONDS - T0)) s${failed[*]:+ (failed: ${failed[*]})}" | tee "$OUT/summary.txt"
[ "$fail" -eq 0 ]
