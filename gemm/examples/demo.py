"""Run the FP8 block-scaled GEMM once on the best available backend and check it.

    python gemm/examples/demo.py                 # DeepSeek-V3 layer 1024 x 1536 x 7168, challenge layout
    python gemm/examples/demo.py --layout k_major --m 64 --n 576 --k 7168

Inputs are drawn as the AMD challenge draws them (standard-normal bf16 cast to fp8, standard-normal
fp32 scales); the result is compared with a float64 reference (rtol 2e-2, atol 1e-3). Prints the
backend, the median time and TFLOP/s; exits non-zero if the result is wrong.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from reference import LAYOUTS, assert_close_challenge, make_inputs, reference_gemm  # noqa: E402

import gemm  # noqa: E402


def best_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def backend_name(device):
    if device == "cpu":
        return f"cpu (exact, {torch.get_num_threads()} threads)"
    props = torch.cuda.get_device_properties(torch.device(device))
    if torch.version.hip:
        return f"rocm {getattr(props, 'gcnArchName', '')} ({props.name})"
    return f"cuda sm_{props.major}{props.minor} ({props.name})"


def native_dtype(device):
    # Each GPU's native fp8 kind; the CPU follows the challenge (fnuz). Both work everywhere.
    if device != "cpu" and not torch.version.hip:
        return "e4m3fn"
    return "e4m3fnuz"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1536)
    parser.add_argument("--k", type=int, default=7168)
    parser.add_argument("--layout", choices=LAYOUTS, default="mn_major", help="mn_major = the challenge's layout")
    parser.add_argument("--dtype", choices=["e4m3fnuz", "e4m3fn"], default=None, help="default: the device's native")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--iters", type=int, default=None, help="timed runs (default 20 on GPU, 3 on CPU)")
    parser.add_argument("--seed", type=int, default=8135)  # the challenge's seed for 1024x1536x7168
    args = parser.parse_args()

    device = args.device or best_device()
    dtype = getattr(torch, "float8_" + (args.dtype or native_dtype(device)))
    iters = args.iters or (3 if device == "cpu" else 20)
    m, n, k = args.m, args.n, args.k

    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, args.layout, args.seed, device)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)

    def sync():
        if device != "cpu":
            torch.cuda.synchronize()

    gemm.gemm(a, b, a_scale, b_scale, out=out)  # warm-up, and the result we check
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        gemm.gemm(a, b, a_scale, b_scale, out=out)
        sync()
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)

    ref = reference_gemm(a, b, a_scale, b_scale)
    got = out.cpu().double()
    rel_err = ((got - ref).abs() / ref.abs().clamp_min(1e-3)).median().item()
    print(f"gemm demo  backend: {backend_name(device)}")
    print(f"  shape M={m} N={n} K={k}  dtype {dtype}  layout {args.layout}")
    print(f"  time {seconds * 1e3:.3f} ms (median of {iters})  {2 * m * n * k / seconds / 1e12:.3f} TFLOP/s")
    try:
        assert_close_challenge(out, ref)
    except AssertionError as e:
        print(f"  check vs float64 reference: FAILED\n{e}")
        return 1
    print(f"  check vs float64 reference: ok (rtol 2e-2, atol 1e-3; median relative error {rel_err:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
