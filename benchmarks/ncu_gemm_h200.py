"""Workload for Nsight Compute (benchmarks/run_h200_ncu.sh): one warm-up and one profiled call of each
implementation on each shape, K-major inputs, nothing else on the GPU in between.

Implementations: ours through the extension (the dispatch choice, or a forced configuration
"v,split,splits,group" like GEMM_CUDA_CONFIG), torch blockwise and per-tensor FP8 _scaled_mm.
Usage: python3 benchmarks/ncu_gemm_h200.py MxNxK[,MxNxK...] [cfg ...]   (cfg "dispatch" = no override;
NCU_NO_TORCH=1 leaves torch out)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm_h200 as gh  # noqa: E402


def main():
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
    cfgs = sys.argv[2:] or ["dispatch"]
    be = gh.ExtBackend()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    for (m, n, k) in shapes:
        inp = gh.make_inputs(m, n, k, "kmajor", gh.FN, gen)
        fns = []
        for c in cfgs:
            cfg = None if c == "dispatch" else [int(x) for x in c.split(",")] + [0]
            fns.append(be.prepare(inp["a"], inp["b"], inp["a_scale"], inp["b_scale"], cfg=cfg)[0])
        if os.environ.get("NCU_NO_TORCH") != "1":
            t_inp = inp if gh.cdiv(k, 128) % 4 == 0 else gh.with_unpadded_b_scale(inp)
            fns.append(gh.torch_blockwise(t_inp))
            fns.append(gh.torch_tensorwise(inp))
        for f in fns:
            f()
            torch.cuda.synchronize()
            f()
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
