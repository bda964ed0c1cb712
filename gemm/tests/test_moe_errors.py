"""Bad input to matmul_batched and matmul_grouped: a Python exception naming the argument, the expected and
the received value, the same through every path that can see it (as test_gemm_errors.py for gemm):

    api        gemm.matmul_batched(...) / gemm.matmul_grouped(...) on CPU tensors   the validator, then the C++ op
    raw        gemm.ops.matmul_batched(...) / ... on CPU                            the C++ checks alone
    api-meta   the Python functions on meta tensors                                the validator and the fake
    raw-meta   the raw ops on meta tensors                                         the fake alone
    api-cuda / raw-cuda                                                            the same on an sm_90 GPU

The values of offsets and tokens_per_expert are checked on the CPU only (reading them on a GPU would
cost a host synchronisation): those errors are tested through api and raw.
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
S, N, K, E = 10, 200, 300, 3  # Bs (3, 2, 3)


def _device(path):
    return {"api": "cpu", "raw": "cpu", "api-meta": "meta", "raw-meta": "meta"}.get(path, "cuda:0")


def _other(device):
    return "meta" if torch.device(device).type == "cpu" else "cpu"


def valid(device):
    return dict(
        A=torch.randn(S, K, device=device).to(torch.bfloat16),
        B=torch.randn(E, N, K, device=device).to(FN),
        Bs=torch.rand(E, 2, 3, device=device) + 0.5,
        expert_ids=torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 5], device=device),
        offsets=torch.tensor([3, 6, 9], dtype=torch.int32, device=device),
        tokens_per_expert=torch.tensor([3.0, 3.0, 3.0], device=device),
        block_size=[128, 128],
        output_dtype=None,
    )


def call(op, path, args):
    routing = ("expert_ids",) if op == "matmul_batched" else ("offsets", "tokens_per_expert")
    tensors = [args["A"], args["B"], args["Bs"]] + [args[name] for name in routing]
    if path.startswith("raw"):
        return getattr(gemm.ops, op)(*tensors, args["block_size"], args["output_dtype"])
    return getattr(gemm, op)(*tensors, args["block_size"], output_dtype=args["output_dtype"])


def _set(name, make):
    def mutate(args, device):
        args[name] = make(args, device)
    return mutate


BOTH = ("matmul_batched", "matmul_grouped")


def _huge_k(k):
    def mutate(args, device):
        args["A"] = torch.zeros(1, 1, device=device, dtype=torch.bfloat16).expand(S, k)
        args["B"] = torch.zeros(1, 1, 1, device=device).to(FN).expand(E, N, k)
        args["Bs"] = torch.ones(1, 1, 1, device=device).expand(E, 2, -(-k // 128))
    return mutate

# (id, ops it applies to, mutation, exception type, message ("{op}" is filled in; or a function of the device),
#  paths that can express it)
BAD = [
    *[(f"{name}-None", BOTH, _set(name, lambda a, d: None), TypeError, f"{{op}}: {name} must be a torch.Tensor, got None",
       ("api",)) for name in ("A", "B", "Bs")],
    ("B-None-raw", BOTH, _set("B", lambda a, d: None), TypeError, "{op}: B must be a torch.Tensor, got None", ("raw",)),
    ("expert_ids-None", ("matmul_batched",), _set("expert_ids", lambda a, d: None), TypeError,
     "matmul_batched: expert_ids must be a torch.Tensor, got None"),
    ("offsets-None", ("matmul_grouped",), _set("offsets", lambda a, d: None), TypeError,
     "matmul_grouped: offsets must be a torch.Tensor, got None"),
    ("tokens-None", ("matmul_grouped",), _set("tokens_per_expert", lambda a, d: None), TypeError,
     "matmul_grouped: tokens_per_expert must be a torch.Tensor, got None"),
    ("expert_ids-list", ("matmul_batched",), _set("expert_ids", lambda a, d: [0] * S), TypeError,
     "matmul_batched: expert_ids must be a torch.Tensor, got list", ("api",)),
    ("A-3d", BOTH, _set("A", lambda a, d: a["A"].reshape(2, 5, K)), RuntimeError,
     "{op}: A must be a 2-D tensor of logical shape (S, K), got a 3-D tensor of shape [2, 5, 300]"),
    ("A-0d", BOTH, _set("A", lambda a, d: a["A"][0, 0]), RuntimeError,
     "{op}: A must be a 2-D tensor of logical shape (S, K), got a 0-D tensor of shape []"),
    ("A-float64", BOTH, _set("A", lambda a, d: a["A"].double()), RuntimeError,
     "{op}: A must be torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    ("A-fp8", BOTH, _set("A", lambda a, d: a["A"].to(FN)), RuntimeError,
     "{op}: A must be torch.bfloat16, torch.float16 or torch.float32, got torch.float8_e4m3fn"),
    ("A-too-many-rows", BOTH, _set("A", lambda a, d: torch.zeros(1, K, device=d).expand(2**31, K)), RuntimeError,
     "{op}: A of shape [2147483648, 300] has 2147483648 rows; at most 2147483647 are supported"),
    ("B-2d", BOTH, _set("B", lambda a, d: a["B"][0]), RuntimeError,
     "{op}: B must be a 3-D tensor of logical shape (E, N, K), got a 2-D tensor of shape [200, 300]"),
    ("B-bfloat16", BOTH, _set("B", lambda a, d: a["B"].to(torch.bfloat16)), RuntimeError,
     "{op}: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.bfloat16"),
    ("B-e5m2", BOTH, _set("B", lambda a, d: a["B"].to(torch.float32).to(torch.float8_e5m2)), RuntimeError,
     "{op}: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got torch.float8_e5m2"),
    ("Bs-2d", BOTH, _set("Bs", lambda a, d: a["Bs"][0]), RuntimeError,
     "{op}: Bs must be a 3-D tensor of logical shape (E, ceil(N/128), ceil(K/128)), got a 2-D tensor of shape [2, 3]"),
    ("Bs-float64", BOTH, _set("Bs", lambda a, d: a["Bs"].double()), RuntimeError,
     "{op}: Bs must be torch.float32 or torch.float8_e8m0fnu, got torch.float64"),
    ("Bs-bfloat16", BOTH, _set("Bs", lambda a, d: a["Bs"].to(torch.bfloat16)), RuntimeError,
     "{op}: Bs must be torch.float32 or torch.float8_e8m0fnu, got torch.bfloat16"),
    ("expert_ids-2d", ("matmul_batched",), _set("expert_ids", lambda a, d: a["expert_ids"].view(2, 5)), RuntimeError,
     "matmul_batched: expert_ids must be a 1-D tensor of logical shape (S,), got a 2-D tensor of shape [2, 5]"),
    ("expert_ids-float", ("matmul_batched",), _set("expert_ids", lambda a, d: a["expert_ids"].float()), RuntimeError,
     "matmul_batched: expert_ids must be an integer tensor (torch.int8, torch.uint8, torch.int16, torch.int32 or "
     "torch.int64), got torch.float32"),
    ("expert_ids-bool", ("matmul_batched",), _set("expert_ids", lambda a, d: a["expert_ids"] > 0), RuntimeError,
     "matmul_batched: expert_ids must be an integer tensor (torch.int8, torch.uint8, torch.int16, torch.int32 or "
     "torch.int64), got torch.bool"),
    ("expert_ids-uint16", ("matmul_batched",), _set("expert_ids", lambda a, d: a["expert_ids"].to(torch.uint16)),
     RuntimeError, "matmul_batched: expert_ids must be an integer tensor (torch.int8, torch.uint8, torch.int16, "
                   "torch.int32 or torch.int64), got torch.uint16"),
    ("offsets-2d", ("matmul_grouped",), _set("offsets", lambda a, d: a["offsets"].view(1, 3)), RuntimeError,
     "matmul_grouped: offsets must be a 1-D tensor of logical shape (E,), got a 2-D tensor of shape [1, 3]"),
    ("offsets-int64", ("matmul_grouped",), _set("offsets", lambda a, d: a["offsets"].long()), RuntimeError,
     "matmul_grouped: offsets must be torch.int32, got torch.int64"),
    ("tokens-0d", ("matmul_grouped",), _set("tokens_per_expert", lambda a, d: a["tokens_per_expert"][0]), RuntimeError,
     "matmul_grouped: tokens_per_expert must be a 1-D tensor of logical shape (E,), got a 0-D tensor of shape []"),
    ("tokens-bfloat16", ("matmul_grouped",), _set("tokens_per_expert", lambda a, d: a["tokens_per_expert"].bfloat16()),
     RuntimeError, "matmul_grouped: tokens_per_expert must be an integer tensor, torch.float32 or torch.float64, got "
                   "torch.bfloat16"),
    ("block_size-64", BOTH, _set("block_size", lambda a, d: [64, 64]), RuntimeError,
     "{op}: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only blocking the "
     "kernels implement), got [64, 64]"),
    ("block_size-one", BOTH, _set("block_size", lambda a, d: [128]), RuntimeError,
     "{op}: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only blocking the "
     "kernels implement), got [128]"),
    ("output_dtype-int", BOTH, _set("output_dtype", lambda a, d: torch.int32), RuntimeError,
     "{op}: output_dtype must be None, torch.bfloat16, torch.float16 or torch.float32, got torch.int32"),
    ("B-other-device", BOTH, _set("B", lambda a, d: torch.empty_like(a["B"], device=_other(d))), RuntimeError,
     lambda dev: f"{{op}}: all tensors must be on the same device; A is on {dev} but B is on {_other(dev)}"),
    ("Bs-other-device", BOTH, _set("Bs", lambda a, d: torch.empty_like(a["Bs"], device=_other(d))), RuntimeError,
     lambda dev: f"{{op}}: all tensors must be on the same device; A is on {dev} but Bs is on {_other(dev)}"),
    ("expert_ids-other-device", ("matmul_batched",), _set("expert_ids", lambda a, d: torch.empty_like(a["expert_ids"], device=_other(d))),
     RuntimeError, lambda dev: f"matmul_batched: all tensors must be on the same device; A is on {dev} but "
                               f"expert_ids is on {_other(dev)}"),
    ("offsets-other-device", ("matmul_grouped",), _set("offsets", lambda a, d: torch.empty_like(a["offsets"], device=_other(d))),
     RuntimeError, lambda dev: f"matmul_grouped: all tensors must be on the same device; A is on {dev} but offsets "
                               f"is on {_other(dev)}"),
    ("tokens-other-device", ("matmul_grouped",),
     _set("tokens_per_expert", lambda a, d: torch.empty_like(a["tokens_per_expert"], device=_other(d))), RuntimeError,
     lambda dev: f"matmul_grouped: all tensors must be on the same device; A is on {dev} but tokens_per_expert is "
                 f"on {_other(dev)}"),
    ("K-mismatch", BOTH, _set("B", lambda a, d: torch.zeros(E, N, K + 1, device=d).to(FN)), RuntimeError,
     "{op}: A (S, K) and B (E, N, K) must have the same K, got A of shape [10, 300] (K = 300) and B of shape "
     "[3, 200, 301] (K = 301)"),
    # K beyond the bound, with expand()ed (zero-stride) operands: no memory is needed to express it.
    *[(f"K-{k}", BOTH, _huge_k(k), RuntimeError,
       f"{{op}}: K must be at most 2097151 (2^21 - 1: the longest sum every backend accumulates faithfully in fp32 "
       f"and indexes), got K = {k} (A of shape [10, {k}]); split K into several calls and add their outputs")
      for k in (2**21, 2**31 + 129, 2**32 + 256)],
    ("Bs-vs-E", BOTH, _set("Bs", lambda a, d: torch.ones(E + 1, 2, 3, device=d)), RuntimeError,
     "{op}: Bs must have shape (E, ceil(N/128), ceil(K/128)) = [3, 2, 3] for B of shape [3, 200, 300], got [4, 2, 3]"),
    ("Bs-vs-N", BOTH, _set("Bs", lambda a, d: torch.ones(E, 1, 3, device=d)), RuntimeError,
     "{op}: Bs must have shape (E, ceil(N/128), ceil(K/128)) = [3, 2, 3] for B of shape [3, 200, 300], got [3, 1, 3]"),
    ("Bs-vs-K-e8m0", BOTH, _set("Bs", lambda a, d: torch.ones(E, 2, 2, device=d).to(torch.float8_e8m0fnu)),
     RuntimeError,
     "{op}: Bs must have shape (E, ceil(N/128), ceil(K/128)) = [3, 2, 3] for B of shape [3, 200, 300], got [3, 2, 2]"),
    ("expert_ids-length", ("matmul_batched",), _set("expert_ids", lambda a, d: a["expert_ids"][:-1]), RuntimeError,
     "matmul_batched: expert_ids must have shape (S,) = [10] for A of shape [10, 300], got [9]"),
    ("offsets-length", ("matmul_grouped",), _set("offsets", lambda a, d: a["offsets"][:2]), RuntimeError,
     "matmul_grouped: offsets must have shape (E,) = [3] for B of shape [3, 200, 300], got [2]"),
    ("tokens-length", ("matmul_grouped",),
     _set("tokens_per_expert", lambda a, d: torch.zeros(4, dtype=torch.int32, device=d)), RuntimeError,
     "matmul_grouped: tokens_per_expert must have shape (E,) = [3] for B of shape [3, 200, 300], got [4]"),
]
CASES = [(op, case) for case in BAD for op in case[1]]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op,case", CASES, ids=[f"{op}-{case[0]}" for op, case in CASES])
def test_bad_input(op, case, path):
    _, _, mutate, exc, message, *only = case
    if only and path.split("-")[0] not in only[0]:
        pytest.skip(f"not expressible through the {path} path")
    device = _device(path)
    args = valid(device)
    mutate(args, device)
    if callable(message):
        message = message(args["A"].device if args["A"] is not None else torch.device(device))
    with pytest.raises(exc, match=re.escape(message.replace("{op}", op))):
        call(op, path, args)


# The values of the grouped routing, on the CPU: offsets inclusive row ends in [0, S], non-decreasing, and
# tokens_per_expert their differences.
VALUE_BAD = [
    ("offset-negative", [-1, 6, 9], [3, 3, 3], "matmul_grouped: offsets[0] = -1 is outside [0, S] = [0, 10]"),
    ("offset-past-S", [3, 6, 11], [3, 3, 5], "matmul_grouped: offsets[2] = 11 is outside [0, S] = [0, 10]"),
    ("offsets-decreasing", [3, 2, 9], [3, 3, 3],
     "matmul_grouped: offsets must be non-decreasing, got offsets[1] = 2 < offsets[0] = 3"),
    ("tokens-first", [3, 6, 9], [2, 3, 3], "matmul_grouped: tokens_per_expert[0] = 2 does not match offsets[0] = 3"),
    ("tokens-middle", [3, 6, 9], [3, 4, 3],
     "matmul_grouped: tokens_per_expert[1] = 4 does not match offsets[1] - offsets[0] = 3"),
    ("tokens-fraction", [3, 6, 9], [3, 3, 2.5],
     "matmul_grouped: tokens_per_expert[2] = 2.500000 does not match offsets[2] - offsets[1] = 3"),
    ("tokens-nan", [3, 6, 9], [3, float("nan"), 3],
     "matmul_grouped: tokens_per_expert[1] = nan does not match offsets[1] - offsets[0] = 3"),
    ("tokens-huge", [3, 6, 9], [2.0**60, 3, 3],
     "matmul_grouped: tokens_per_expert[0] = 1152921504606846976.000000 does not match offsets[0] = 3"),
]


@pytest.mark.parametrize("path", ["api", "raw"])
@pytest.mark.parametrize("tokens_dtype", [torch.float32, torch.int32, torch.int64])
@pytest.mark.parametrize("case", VALUE_BAD, ids=[c[0] for c in VALUE_BAD])
def test_bad_grouped_values_on_cpu(case, tokens_dtype, path):
    name, offsets, tokens, message = case
    if tokens_dtype != torch.float32 and name in ("tokens-fraction", "tokens-nan", "tokens-huge"):
        pytest.skip("a value an integer dtype cannot hold")
    args = valid("cpu")
    args["offsets"] = torch.tensor(offsets, dtype=torch.int32)
    args["tokens_per_expert"] = torch.tensor(tokens, dtype=tokens_dtype)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call("matmul_grouped", path, args)


def test_strided_offsets_are_read_with_their_stride():
    args = valid("cpu")
    spread = torch.tensor([3, -1, 6, -1, 2], dtype=torch.int32)
    args["offsets"] = spread[::2]  # [3, 6, 2]: decreasing at index 2
    with pytest.raises(RuntimeError, match=re.escape("offsets[2] = 2 < offsets[1] = 6")):
        call("matmul_grouped", "api", args)


def test_placeholder_ids_are_not_an_error():
    args = valid("cpu")
    args["expert_ids"] = torch.tensor([-5, 3, 100, 2**40, 0, 1, 2, -1, 3, 4])
    c = call("matmul_batched", "api", args)
    zero = torch.tensor([True, True, True, True, False, False, False, True, True, True])
    assert torch.equal(c[zero], torch.zeros(int(zero.sum()), N, dtype=torch.bfloat16))


@pytest.mark.parametrize("op", BOTH)
def test_bad_input_under_torch_compile(op):
    # Tracing runs the fake implementation, which must refuse with the eager message.
    args = valid("cpu")
    args["Bs"] = args["Bs"].double()

    @torch.compile(fullgraph=True, backend="eager")
    def run(**kw):
        return call(op, "api", kw)

    with pytest.raises(RuntimeError, match=re.escape(f"{op}: Bs must be torch.float32 or torch.float8_e8m0fnu")):
        run(**args)
