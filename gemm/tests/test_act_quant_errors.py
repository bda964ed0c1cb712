"""Bad input to fp8_act_quant and matmul_2d: a Python exception naming the argument, the expected and
the received value, the same through every path that can see it (as test_gemm_errors.py for gemm):

    api        gemm.fp8_act_quant(...) / gemm.matmul_2d(...) on CPU tensors   the validator, then the C++ op
    raw        gemm.ops.fp8_act_quant(...) / gemm.ops.matmul_2d(...) on CPU    the C++ checks alone
    api-meta   the Python functions on meta tensors                           the validator and the fake
    raw-meta   the raw ops on meta tensors                                    the fake alone
    api-cuda / raw-cuda                                                       the same on an sm_90 GPU
"""
import re

import pytest
import torch

import gemm

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
PATHS = ["api", "raw", "api-meta", "raw-meta"] + [
    pytest.param(p, marks=pytest.mark.skipif(not _SM90, reason="needs a CUDA device of compute capability 9.0"))
    for p in ("api-cuda", "raw-cuda")]


def _device(path):
    return {"api": "cpu", "raw": "cpu", "api-meta": "meta", "raw-meta": "meta"}.get(path, "cuda:0")


def _other(device):
    return "meta" if torch.device(device).type == "cpu" else "cpu"


def _split_scale(scale):
    """The raw ops' (Tensor? activation_scale, float? activation_scale_value) pair."""
    if scale is None or isinstance(scale, torch.Tensor):
        return scale, None
    return None, scale


# ------------------------------------------------------------------------------------------------------
# fp8_act_quant


def quant_args(device):
    return dict(x=torch.randn(6, 300, device=device).to(torch.bfloat16), block_size=128, dtype=FN,
                activation_scale=None)


def call_quant(path, args):
    if path.startswith("raw"):
        return gemm.ops.fp8_act_quant(args["x"], args["block_size"], args["dtype"], *_split_scale(args["activation_scale"]))
    return gemm.fp8_act_quant(args["x"], args["block_size"], args["dtype"], activation_scale=args["activation_scale"])


def _set(name, make):
    def mutate(args, device):
        args[name] = make(args, device)
    return mutate


def _both_scales(args, device):
    args["activation_scale"] = (torch.ones(1, device=device), 0.5)


# (id, mutation, exception type, message (or a function of the device), paths that can express it)
QUANT_BAD = [
    # Through the raw op a None x leaves no tensor to dispatch on: torch's dispatcher refuses it.
    ("x-None", _set("x", lambda a, d: None), TypeError, "fp8_act_quant: x must be a torch.Tensor, got None", ("api",)),
    ("x-list", _set("x", lambda a, d: [1.0, 2.0]), TypeError, "fp8_act_quant: x must be a torch.Tensor, got list",
     ("api",)),
    ("x-0d", _set("x", lambda a, d: a["x"][0, 0]), RuntimeError,
     "fp8_act_quant: x must have at least one dimension (logical shape (..., K)), got a 0-D tensor"),
    ("x-float64", _set("x", lambda a, d: a["x"].double()), RuntimeError,
     "fp8_act_quant: x must be torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    ("x-fp8", _set("x", lambda a, d: a["x"].to(FN)), RuntimeError,
     "fp8_act_quant: x must be torch.bfloat16, torch.float16 or torch.float32, got torch.float8_e4m3fn"),
    ("x-too-many-rows", _set("x", lambda a, d: torch.zeros(1, 1, device=d).expand(2**31, 1)), RuntimeError,
     "fp8_act_quant: x of shape [2147483648, 1] has 2147483648 rows (the product of its leading sizes); at most "
     "2147483647 are supported"),
    ("block_size-64", _set("block_size", lambda a, d: 64), RuntimeError,
     "fp8_act_quant: block_size must be 128 (the only group width the kernels implement), got 64"),
    ("block_size-list", _set("block_size", lambda a, d: [128, 128]), RuntimeError,
     "fp8_act_quant: block_size must be 128 (the only group width the kernels implement), got [128, 128]", ("api",)),
    ("dtype-e5m2", _set("dtype", lambda a, d: torch.float8_e5m2), RuntimeError,
     "fp8_act_quant: dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.float8_e5m2"),
    ("dtype-bfloat16", _set("dtype", lambda a, d: torch.bfloat16), RuntimeError,
     "fp8_act_quant: dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.bfloat16"),
    ("scale-two-elements", _set("activation_scale", lambda a, d: torch.ones(2, device=d)), RuntimeError,
     "fp8_act_quant: activation_scale must have exactly one element (a per-tensor scale), got shape [2]"),
    ("scale-float64", _set("activation_scale", lambda a, d: torch.ones(1, device=d, dtype=torch.float64)),
     RuntimeError, "fp8_act_quant: activation_scale must be torch.float32, got torch.float64"),
    ("scale-other-device", _set("activation_scale", lambda a, d: torch.ones(1, device=_other(d))), RuntimeError,
     lambda d: f"fp8_act_quant: all tensors must be on the same device; x is on {d} but activation_scale is on "
               f"{_other(d)}"),
    ("scale-str", _set("activation_scale", lambda a, d: "0.5"), TypeError,
     "fp8_act_quant: activation_scale must be None, a Python float or a one-element torch.float32 tensor, got str",
     ("api",)),
    ("scale-tensor-and-value", _both_scales, RuntimeError,
     "fp8_act_quant: activation_scale_value must be None when activation_scale is a tensor (pass one of them)",
     ("raw",)),
]


def _message(message, device):
    return message(torch.device(device)) if callable(message) else message


def _run_case(case, path, make_args, call):
    _, mutate, exc, message, *only = case
    if only and path.split("-")[0] not in only[0]:
        pytest.skip(f"not expressible through the {path} path")
    device = _device(path)
    args = make_args(device)
    mutate(args, device)
    if isinstance(args.get("activation_scale"), tuple):  # raw only: both halves of the pair
        tensor, value = args["activation_scale"]
        with pytest.raises(exc, match=re.escape(_message(message, device))):
            if "x" in args:
                gemm.ops.fp8_act_quant(args["x"], args["block_size"], args["dtype"], tensor, value)
            else:
                gemm.ops.matmul_2d(args["A"], args["B"], args["Bs"], args["block_size"], args["output_dtype"], tensor,
                                   value)
        return
    with pytest.raises(exc, match=re.escape(_message(message, device))):
        call(path, args)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", QUANT_BAD, ids=[c[0] for c in QUANT_BAD])
def test_fp8_act_quant_bad_input(case, path):
    _run_case(case, path, quant_args, call_quant)


# ------------------------------------------------------------------------------------------------------
# matmul_2d


def matmul_args(device):
    return dict(A=torch.randn(6, 300, device=device).to(torch.bfloat16),
                B=torch.randn(200, 300, device=device).to(FN), Bs=torch.ones(2, 3, device=device),
                block_size=[128, 128], output_dtype=None, activation_scale=None)


def call_matmul(path, args):
    if path.startswith("raw"):
        return gemm.ops.matmul_2d(args["A"], args["B"], args["Bs"], args["block_size"], args["output_dtype"],
                                  *_split_scale(args["activation_scale"]))
    return gemm.matmul_2d(args["A"], args["B"], args["Bs"], args["block_size"], output_dtype=args["output_dtype"],
                          activation_scale=args["activation_scale"])


def _huge_k_matmul(k):
    def mutate(args, device):
        kb = k // 128 + (k % 128 != 0)
        args.update(A=torch.zeros(1, 1, device=device, dtype=torch.bfloat16).expand(1, k),
                    B=torch.zeros(1, 1, device=device).to(FN).expand(1, k),
                    Bs=torch.ones(1, 1, device=device).expand(1, kb))
    return mutate


BS_SHAPE = "matmul_2d: Bs must have shape (ceil(N/128), ceil(K/128)) = [2, 3] for B of shape [200, 300], got "
MATMUL_BAD = [
    *[(f"{name}-None", _set(name, lambda a, d: None), TypeError, f"matmul_2d: {name} must be a torch.Tensor, got None")
      for name in ("A", "B", "Bs")],
    ("A-float64", _set("A", lambda a, d: a["A"].double()), RuntimeError,
     "matmul_2d: A must be torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    ("A-0d", _set("A", lambda a, d: a["A"][0, 0]), RuntimeError,
     "matmul_2d: A must have at least one dimension (logical shape (..., K)), got a 0-D tensor"),
    ("B-bfloat16", _set("B", lambda a, d: a["B"].to(torch.bfloat16)), RuntimeError,
     "matmul_2d: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.bfloat16"),
    ("B-e5m2", _set("B", lambda a, d: a["B"].float().to(torch.float8_e5m2)), RuntimeError,
     "matmul_2d: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.float8_e5m2"),
    ("B-3d", _set("B", lambda a, d: a["B"].reshape(2, 100, 300)), RuntimeError,
     "matmul_2d: B must be a 2-D tensor of logical shape (N, K), got a 3-D tensor of shape [2, 100, 300]"),
    ("Bs-1d", _set("Bs", lambda a, d: a["Bs"].reshape(-1)), RuntimeError,
     "matmul_2d: Bs must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a 1-D tensor of shape [6]"),
    ("Bs-0d", _set("Bs", lambda a, d: torch.tensor(0.5, device=d)), RuntimeError,
     "matmul_2d: Bs must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a 0-D tensor of shape [] "
     "(hint: per-tensor scaling is not supported as such; pass the one scale as a block scale of logical shape "
     "(ceil(N/128), ceil(K/128)), e.g. Bs.expand(ceil(N/128), ceil(K/128)), a view that costs no copy)"),
    ("Bs-float64", _set("Bs", lambda a, d: a["Bs"].double()), RuntimeError,
     "matmul_2d: Bs must be torch.float32 or torch.float8_e8m0fnu, got torch.float64"),
    ("block_size-64", _set("block_size", lambda a, d: [64, 64]), RuntimeError,
     "matmul_2d: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only "
     "blocking the kernels implement), got [64, 64]"),
    ("block_size-one", _set("block_size", lambda a, d: [128]), RuntimeError,
     "matmul_2d: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only "
     "blocking the kernels implement), got [128]"),
    ("block_size-None", _set("block_size", lambda a, d: None), RuntimeError,
     "matmul_2d: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only "
     "blocking the kernels implement), got None", ("api",)),
    ("output_dtype-float64", _set("output_dtype", lambda a, d: torch.float64), RuntimeError,
     "matmul_2d: output_dtype must be None, torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    ("B-other-device", _set("B", lambda a, d: torch.empty_like(a["B"], device=_other(d))), RuntimeError,
     lambda d: f"matmul_2d: all tensors must be on the same device; A is on {d} but B is on {_other(d)}"),
    ("Bs-other-device", _set("Bs", lambda a, d: torch.empty_like(a["Bs"], device=_other(d))), RuntimeError,
     lambda d: f"matmul_2d: all tensors must be on the same device; A is on {d} but Bs is on {_other(d)}"),
    ("k-mismatch", _set("B", lambda a, d: torch.zeros(200, 301, device=d).to(FN)), RuntimeError,
     "matmul_2d: A (..., K) and B (N, K) must have the same K, got A of shape [6, 300] (K = 300) and B of shape "
     "[200, 301] (K = 301)"),
    # K beyond the bound, with expand()ed (zero-stride) operands: no memory is needed to express it.
    *[(f"k-{k}", _huge_k_matmul(k), RuntimeError,
       f"matmul_2d: K must be at most 2097151 (2^21 - 1: the longest sum every backend accumulates faithfully in "
       f"fp32 and indexes), got K = {k} (A of shape [1, {k}]); split K into several calls and add their outputs")
      for k in (2**21, 2**31 + 129, 2**32 + 256, 2**63 - 1)],
    ("Bs-transposed", _set("Bs", lambda a, d: a["Bs"].T), RuntimeError, BS_SHAPE + "[3, 2]"),
    ("Bs-vs-n", _set("Bs", lambda a, d: torch.ones(1, 3, device=d)), RuntimeError, BS_SHAPE + "[1, 3]"),
    ("scale-two-elements", _set("activation_scale", lambda a, d: torch.ones(1, 2, device=d)), RuntimeError,
     "matmul_2d: activation_scale must have exactly one element (a per-tensor scale), got shape [1, 2]"),
    ("scale-other-device", _set("activation_scale", lambda a, d: torch.ones(1, device=_other(d))), RuntimeError,
     lambda d: f"matmul_2d: all tensors must be on the same device; A is on {d} but activation_scale is on "
               f"{_other(d)}"),
    ("scale-tensor-and-value", _both_scales, RuntimeError,
     "matmul_2d: activation_scale_value must be None when activation_scale is a tensor (pass one of them)", ("raw",)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", MATMUL_BAD, ids=[c[0] for c in MATMUL_BAD])
def test_matmul_2d_bad_input(case, path):
    _run_case(case, path, matmul_args, call_matmul)


@pytest.mark.parametrize("op,case", [("quant", "x-float64"), ("quant", "block_size-64"), ("matmul", "Bs-vs-n"),
                                     ("matmul", "block_size-64")])
def test_bad_input_under_torch_compile(op, case):
    # Tracing runs the fake implementation, which must refuse with the eager message.
    table, make_args, call = (QUANT_BAD, quant_args, call_quant) if op == "quant" else (MATMUL_BAD, matmul_args,
                                                                                        call_matmul)
    _, mutate, exc, message, *_ = next(c for c in table if c[0] == case)
    args = make_args("cpu")
    mutate(args, "cpu")
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: call("api", a), fullgraph=True)
    with pytest.raises(exc, match=re.escape(message)):
        compiled(args)
