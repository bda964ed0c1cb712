"""Every bad input is a Python exception naming the argument, the expected and the received value.

One list of bad inputs (BAD_INPUTS), each run through every path that can see it:

    api        gemm.gemm(...) on CPU tensors       the Python validator (_validate.py), then the C++ op
    raw        gemm.ops.gemm(out, ...) on CPU      the C++ checks of torch_binding.cpp alone
    api-meta   gemm.gemm(...) on meta tensors      the validator and the fake implementation
    raw-meta   gemm.ops.gemm(...) on meta tensors  the fake implementation alone
    api-cuda / raw-cuda                            the same on an sm_90 GPU (skipped without one)

and each must raise the same exception type with the same message. Convention (README, "Errors"):
TypeError when an argument is not a tensor (None included), RuntimeError for a tensor with the wrong
dtype, shape, device, gradient flag or memory overlap.
"""
import re

import pytest
import torch

import gemm
from reference import assert_close_challenge, make_inputs, reference_gemm

M, N, K = 64, 200, 300  # ceil(K/128) = 3, ceil(N/128) = 2
FNUZ, FN = torch.float8_e4m3fnuz, torch.float8_e4m3fn
_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
PATHS = ["api", "raw", "api-meta", "raw-meta"] + [
    pytest.param(p, marks=pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0"))
    for p in ("api-cuda", "raw-cuda")]
NAMES = ("out", "a", "b", "a_scale", "b_scale")


def valid(device, m=M, n=N, k=K, dtype=FNUZ):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, "k_major", seed=0)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    return {name: t.to(device) for name, t in dict(out=out, a=a, b=b, a_scale=a_scale, b_scale=b_scale).items()}


def _device(path):
    return {"api": "cpu", "raw": "cpu", "api-meta": "meta", "raw-meta": "meta"}.get(path, "cuda")


def call(path, args):
    if path.startswith("raw"):
        return gemm.ops.gemm(*(args[name] for name in NAMES))
    return gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"], out=args["out"])


def _other_device(device_type):
    """A second device to mix with the first: meta beside the CPU, the CPU beside meta or a GPU."""
    return "meta" if device_type == "cpu" else "cpu"


def _fp8_buffer_pair(device):
    """(a, out): a (M, K) fp8 and out (M, N) bf16 over the same bytes."""
    base = torch.zeros(M * 2 * N, dtype=torch.uint8, device=device)
    return base[: M * K].view(FNUZ).view(M, K), base.view(torch.bfloat16).view(M, N)


def _out_over_a(args):
    a, out = _fp8_buffer_pair(args["a"].device)
    a.view(torch.uint8).copy_(args["a"].view(torch.uint8))
    args["a"], args["out"] = a, out


def _out_columns_over_a(args):
    # out a column slice whose rows interleave with a's rows inside one buffer (no element is shared by
    # construction of the strides, but the byte ranges intersect: refused).
    base = torch.zeros(M * 2 * (N + 8), dtype=torch.uint8, device=args["a"].device)
    args["out"] = base.view(torch.bfloat16).view(M, N + 8)[:, :N]
    args["a"] = base[: M * K].view(FNUZ).view(M, K)


def _out_over_expanded_a_scale(args):
    base = torch.zeros(M * N, dtype=torch.float32, device=args["a"].device)
    args["a_scale"] = base[:3].view(1, 3).expand(M, 3)
    args["out"] = base.view(torch.bfloat16)[: M * N].view(M, N)


def _out_over_b_scale(args):
    base = torch.zeros(M * N, dtype=torch.float32, device=args["a"].device)
    args["b_scale"] = base[-6:].view(3, 2).T  # (2, 3), N-major
    args["out"] = base.view(torch.bfloat16)[M * N :].view(M, N)


def _set(name, make):
    def mutate(args):
        args[name] = make(args)
    return mutate


def _expanded_k(k, scales_kb=None):
    """a (1, K) and b (1, K) expand()ed from one byte: a K of any size without the memory; scales of ceil(K/128)
    columns (or scales_kb), expanded too."""
    def mutate(args):
        dev = args["a"].device
        one = torch.ones(1, 1, device=dev).to(FNUZ).expand(1, k)
        kb = scales_kb if scales_kb is not None else k // 128 + (k % 128 != 0)
        args.update(a=one, b=one, a_scale=torch.ones(1, 1, device=dev).expand(1, kb),
                    b_scale=torch.ones(1, 1, device=dev).expand(1, kb),
                    out=torch.empty(1, 1, dtype=torch.bfloat16, device=dev))
    return mutate


def _k_bound(k):
    return (f"gemm: K must be at most 2097151 (2^21 - 1: the longest sum every backend accumulates faithfully in fp32 "
            f"and indexes), got K = {k} (a of shape [1, {k}]); split K into several calls and add their outputs")


PER_TENSOR_HINT = ("(hint: per-tensor scaling is not supported as such; pass the one scale as a block scale of logical "
                   "shape {logical}, e.g. {name}.expand{logical}, a view that costs no copy)")


# (id, mutation of valid(device), exception type, message(device), paths that can express it)
BAD_INPUTS = [
    ("a-bfloat16", _set("a", lambda x: x["a"].to(torch.bfloat16)), RuntimeError,
     "gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got torch.bfloat16"),
    ("a-e5m2", _set("a", lambda x: x["a"].to(torch.float32).to(torch.float8_e5m2)), RuntimeError,
     "gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got torch.float8_e5m2"),
    ("mixed-fp8-kinds", _set("b", lambda x: x["b"].to(torch.float32).to(FN)), RuntimeError,
     "gemm: b must have the same dtype as a (torch.float8_e4m3fnuz), got torch.float8_e4m3fn; mixing fp8 kinds"),
    ("out-float16", _set("out", lambda x: x["out"].to(torch.float16)), RuntimeError,
     "gemm: out must be torch.bfloat16, got torch.float16"),
    ("a_scale-bfloat16", _set("a_scale", lambda x: x["a_scale"].to(torch.bfloat16)), RuntimeError,
     "gemm: a_scale must be torch.float32 or torch.float8_e8m0fnu, got torch.bfloat16"),
    ("b_scale-float64", _set("b_scale", lambda x: x["b_scale"].to(torch.float64)), RuntimeError,
     "gemm: b_scale must be torch.float32 or torch.float8_e8m0fnu, got torch.float64"),
    ("a_scale-vs-k", _set("a_scale", lambda x: torch.ones(M, 4, device=x["a"].device)), RuntimeError,
     "gemm: a_scale must have shape (M, ceil(K/128)) = [64, 3] for a of shape [64, 300], got [64, 4]"),
    ("a_scale-vs-m", _set("a_scale", lambda x: torch.ones(M + 1, 3, device=x["a"].device)), RuntimeError,
     "gemm: a_scale must have shape (M, ceil(K/128)) = [64, 3] for a of shape [64, 300], got [65, 3]"),
    ("b_scale-vs-n", _set("b_scale", lambda x: torch.ones(1, 3, device=x["a"].device)), RuntimeError,
     "gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = [2, 3] for b of shape [200, 300], got [1, 3]"),
    ("b_scale-vs-k", _set("b_scale", lambda x: torch.ones(2, 2, device=x["a"].device)), RuntimeError,
     "gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = [2, 3] for b of shape [200, 300], got [2, 2]"),
    ("a-b-k-mismatch", _set("b", lambda x: valid(x["a"].device, k=K + 1)["b"]), RuntimeError,
     "gemm: a (M, K) and b (N, K) must have the same K, got a of shape [64, 300] (K = 300) and b of shape "
     "[200, 301] (K = 301)"),
    ("out-shape", _set("out", lambda x: torch.empty(N, M, dtype=torch.bfloat16, device=x["a"].device)), RuntimeError,
     "gemm: out must have shape (M, N) = [64, 200], got [200, 64]"),
    ("a_scale-other-device",
     _set("a_scale", lambda x: torch.empty_like(x["a_scale"], device=_other_device(x["a"].device.type))),
     RuntimeError, lambda dev: f"gemm: all tensors must be on the same device; a is on {dev} but a_scale is on "
                               f"{_other_device(dev.type)}"),
    ("out-other-device", _set("out", lambda x: torch.empty_like(x["out"], device=_other_device(x["a"].device.type))),
     RuntimeError, lambda dev: f"gemm: all tensors must be on the same device; a is on {dev} but out is on "
                               f"{_other_device(dev.type)}"),
    ("a-1d", _set("a", lambda x: x["a"].reshape(-1)), RuntimeError,
     "gemm: a must be a 2-D tensor of logical shape (M, K), got a 1-D tensor of shape [19200]"),
    ("b-3d", _set("b", lambda x: x["b"].reshape(2, 100, K)), RuntimeError,
     "gemm: b must be a 2-D tensor of logical shape (N, K), got a 3-D tensor of shape [2, 100, 300]"),
    ("a_scale-3d", _set("a_scale", lambda x: x["a_scale"].unsqueeze(0)), RuntimeError,
     "gemm: a_scale must be a 2-D tensor of logical shape (M, ceil(K/128)), got a 3-D tensor of shape [1, 64, 3]"),
    ("b_scale-1d", _set("b_scale", lambda x: x["b_scale"].reshape(-1)), RuntimeError,
     "gemm: b_scale must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a 1-D tensor of shape [6]"),
    ("out-1d", _set("out", lambda x: x["out"].reshape(-1)), RuntimeError,
     "gemm: out must be a 2-D tensor of logical shape (M, N), got a 1-D tensor of shape [12800]"),
    *[(f"{name}-None", _set(name, lambda x: None), TypeError, f"gemm: {name} must be a torch.Tensor, got None")
      for name in ("a", "b", "a_scale", "b_scale")],
    ("out-None", _set("out", lambda x: None), TypeError, "gemm: out must be a torch.Tensor, got None", ("raw",)),
    ("b-list", _set("b", lambda x: [[1.0]]), TypeError, "gemm: b must be a torch.Tensor, got list", ("api",)),
    ("out-requires-grad", _set("out", lambda x: x["out"].detach().requires_grad_(True)), RuntimeError,
     "gemm: out must not require grad: the op writes into it in place and has no backward"),
    ("out-expanded", _set("out", lambda x: x["out"][:1].expand(M, N)), RuntimeError,
     "gemm: out must not overlap itself, got strides [0, 1] for shape [64, 200]: two elements may share memory"),
    ("out-rows-overlap",
     _set("out", lambda x: torch.zeros(M * N, dtype=torch.bfloat16, device=x["a"].device).as_strided((M, N), (100, 1))),
     RuntimeError, "gemm: out must not overlap itself, got strides [100, 1] for shape [64, 200]"),
    ("out-over-a", _out_over_a, RuntimeError, "gemm: out must not overlap a in memory"),
    ("out-columns-over-a", _out_columns_over_a, RuntimeError, "gemm: out must not overlap a in memory"),
    ("out-over-expanded-a_scale", _out_over_expanded_a_scale, RuntimeError, "gemm: out must not overlap a_scale"),
    ("out-over-b_scale", _out_over_b_scale, RuntimeError, "gemm: out must not overlap b_scale in memory"),
    # K beyond the bound (with scales of the matching shape, or not: the bound comes first).
    *[(f"k-{k}", _expanded_k(k), RuntimeError, _k_bound(k)) for k in (2**21, 2**31 + 129, 2**32 + 256, 2**63 - 1)],
    ("k-huge-scales-1", _expanded_k(2**63 - 1, scales_kb=1), RuntimeError, _k_bound(2**63 - 1)),
    # A 0-D (per-tensor) scale.
    *[(f"{name}-0d", _set(name, lambda x: torch.tensor(2.0, device=x["a"].device)), RuntimeError,
       f"gemm: {name} must be a 2-D tensor of logical shape {logical}, got a 0-D tensor of shape [] "
       + PER_TENSOR_HINT.format(name=name, logical=logical))
      for name, logical in (("a_scale", "(M, ceil(K/128))"), ("b_scale", "(ceil(N/128), ceil(K/128))"))],
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input(case, path):
    _, mutate, exc, message, *only = case
    if only and path.split("-")[0] not in only[0]:
        pytest.skip(f"not expressible through the {path} path")
    args = valid(_device(path))
    mutate(args)
    if callable(message):
        message = message(torch.device(_device(path)) if _device(path) != "cuda" else args["a"].device)
    with pytest.raises(exc, match=re.escape(message)):
        call(path, args)


@pytest.mark.parametrize("case", ["a-bfloat16", "out-expanded", "out-over-a", "b_scale-vs-n"])
def test_bad_input_under_torch_compile(case):
    # Tracing runs the fake implementation, which must refuse with the eager message.
    _, mutate, exc, message, *_ = next(c for c in BAD_INPUTS if c[0] == case)
    args = valid("cpu")
    mutate(args)
    compiled = torch.compile(gemm.gemm, fullgraph=True)
    with pytest.raises(exc, match=re.escape(message)):
        compiled(args["a"], args["b"], args["a_scale"], args["b_scale"], out=args["out"])


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_without_out_the_wrapper_fails_before_allocating(device):
    args = valid(device)
    with pytest.raises(RuntimeError, match=re.escape("gemm: a must be a 2-D tensor of logical shape (M, K)")):
        gemm.gemm(args["a"].reshape(-1), args["b"], args["a_scale"], args["b_scale"])
    with pytest.raises(TypeError, match=re.escape("gemm: b must be a torch.Tensor, got None")):
        gemm.gemm(args["a"], None, args["a_scale"], args["b_scale"])


def test_out_requiring_grad_is_accepted_under_no_grad():
    # As torch's in-place ops: a tensor that requires grad may be written under torch.no_grad().
    args = valid("cpu")
    out = args["out"].requires_grad_(True)
    with torch.no_grad():
        gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"], out=out)
        gemm.ops.gemm(out, args["a"], args["b"], args["a_scale"], args["b_scale"])
    assert_close_challenge(out.detach(), reference_gemm(args["a"], args["b"], args["a_scale"], args["b_scale"]))


@pytest.mark.parametrize("path", ["api", "raw"])
def test_out_sharing_a_buffer_without_overlap_is_accepted(path):
    # One allocation holding a and out side by side: disjoint byte ranges, nothing to refuse.
    a_ref, b, a_scale, b_scale = make_inputs(M, N, K, FNUZ, "k_major", seed=6)
    base = torch.zeros(M * K + 2 * M * N, dtype=torch.uint8)
    a = base[: M * K].view(FNUZ).view(M, K)
    a.view(torch.uint8).copy_(a_ref.view(torch.uint8))
    out = base[M * K :].view(torch.bfloat16).view(M, N)
    call(path, dict(out=out, a=a, b=b, a_scale=a_scale, b_scale=b_scale))
    assert_close_challenge(out, reference_gemm(a_ref, b, a_scale, b_scale))


@pytest.mark.parametrize("path", ["api", "raw", "api-meta"])
def test_seed_tutorial_physical_layout(path):
    # The seed tutorial keeps the challenge's physical (K, M) / (K, N) tensors and indexes them itself;
    # handing those to gemm must say how to fix it.
    a, b, a_scale, b_scale = (t.to(_device(path)) for t in make_inputs(M, N, K, layout="mn_major", seed=1))
    out = torch.empty(M, N, dtype=torch.bfloat16, device=_device(path))
    a_phys, b_phys = a.T, b.T  # contiguous (K, M) and (K, N)
    with pytest.raises(RuntimeError, match=re.escape("must have the same K")) as info:
        call(path, dict(out=out, a=a_phys, b=b_phys, a_scale=a_scale, b_scale=b_scale))
    assert "pass a.T and b.T" in str(info.value)
    with pytest.raises(RuntimeError, match=re.escape("pass a.T")) as info:
        call(path, dict(out=out, a=a_phys, b=b, a_scale=a_scale, b_scale=b_scale))
    assert "(K, M)" in str(info.value)
    with pytest.raises(RuntimeError, match=re.escape("pass b.T")):
        call(path, dict(out=out, a=a, b=b_phys, a_scale=a_scale, b_scale=b_scale))
    if path == "api":  # and the suggested fix works
        assert_close_challenge(gemm.gemm(a_phys.T, b_phys.T, a_scale, b_scale), reference_gemm(a, b, a_scale, b_scale))


@pytest.mark.parametrize("path", ["api", "raw", "api-meta"])
def test_seed_tutorial_square_case(path):
    # 64x64x128 (the first challenge test): the K check passes by accident, the scale check catches it.
    a, b, a_scale, b_scale = (t.to(_device(path)) for t in make_inputs(64, 64, 128, layout="mn_major", seed=2))
    out = torch.empty(64, 64, dtype=torch.bfloat16, device=_device(path))
    with pytest.raises(RuntimeError, match=re.escape("pass a.T and b.T")):
        call(path, dict(out=out, a=a.T, b=b.T, a_scale=a_scale, b_scale=b_scale))


@pytest.mark.parametrize("path", ["api", "raw", "api-meta", "raw-meta"])
def test_largest_k_is_accepted_and_summed_exactly(path):
    # K = 2^21 - 1 ones with unit scales, expand()ed: the sum is K, exact in fp32 (bf16 rounds it to 2^21).
    args = valid(_device(path))
    _expanded_k(2**21 - 1)(args)
    meta = path.endswith("meta")
    if not meta:
        args["out"].fill_(float("nan"))
    call(path, args)
    if not meta:
        assert args["out"].item() == float(2**21)


@pytest.mark.parametrize("name", ["a_scale", "b_scale"])
def test_per_tensor_scale_through_the_hinted_view(name):
    # The hint's fix: a per-tensor scale expand()ed to the block scales' shape gives the per-tensor result.
    a, b, a_scale, b_scale = make_inputs(M, N, K, FNUZ, "k_major", seed=5)
    scale = torch.tensor(0.75)
    blocks = dict(a_scale=a_scale, b_scale=b_scale)
    blocks[name] = scale.expand(*blocks[name].shape)
    out = gemm.gemm(a, b, blocks["a_scale"], blocks["b_scale"])
    assert_close_challenge(out, reference_gemm(a, b, blocks["a_scale"].contiguous(), blocks["b_scale"].contiguous()))
