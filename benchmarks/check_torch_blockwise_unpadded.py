"""torch._scaled_mm blockwise (1x128 / 128x128 scales) with the *unpadded* b_scale row stride -- the only
one torch 2.11 accepts when K/128 is not a multiple of 4 -- on the benchmark shapes with K = 256 and 2304,
run under compute-sanitizer memcheck on the H200 to find out whether its wrong results come with
out-of-bounds reads. usage: compute-sanitizer --tool memcheck python3 benchmarks/check_torch_blockwise_unpadded.py
Prints each call's relative error against the float64 reference of gemm_h200.py."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_h200 import FN, make_inputs, reference, torch_blockwise, with_unpadded_b_scale  # noqa: E402


def main():
    gen = torch.Generator(device="cuda")
    for (m, n, k) in [(128, 7168, 256), (128, 7168, 2304), (1024, 7168, 256)]:
        gen.manual_seed(11)
        inp = make_inputs(m, n, k, "kmajor", FN, gen)
        inp = with_unpadded_b_scale(inp)
        out = torch_blockwise(inp)()
        torch.cuda.synchronize()
        ref = reference(inp)
        ref = ref[0] if isinstance(ref, tuple) else ref
        err = ((out.double() - ref).norm() / ref.norm()).item()
        print(f"{m}x{n}x{k}: b_scale stride {tuple(inp['b_scale'].stride())}, relative error {err:.3f}", flush=True)


if __name__ == "__main__":
    main()
