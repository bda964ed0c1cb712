"""Argument checks of the ops: the one validation of the Python API and of the fake (meta) implementations.

``gemm()`` runs :func:`check_inputs` (``fp8_act_quant()`` :func:`check_act_quant`, ``matmul_2d()``
:func:`check_matmul_2d`, ``matmul_batched()`` / ``matmul_grouped()`` :func:`check_matmul_batched` /
:func:`check_matmul_grouped`) before it calls the op, and the fake implementation runs the same function on
meta/fake tensors, so eager calls, meta tensors and torch.compile tracing report the same errors.
torch_binding.cpp repeats every check, in the same order and with the same messages, for callers of
the raw ops (``ops.gemm``, ...); the tests hold the two to the same lists of bad inputs.

Conventions: ``TypeError`` when an argument is not a tensor (``None`` included); ``RuntimeError`` for a
tensor with the wrong dtype, shape, device, gradient flag or memory overlap (as torch's own ops).
"""
import torch
from torch._subclasses.fake_tensor import FakeTensor

QUANT_BLOCK = 128
FP8_DTYPES = (torch.float8_e4m3fnuz, torch.float8_e4m3fn)
# Scales: float32, or UE8M0 (2^(code - 127)), which the binding converts exactly to float32.
SCALE_DTYPES = (torch.float32, torch.float8_e8m0fnu)
# The largest K of the GEMMs (gemm, matmul_2d and the expert GEMMs): at most 2^14 K blocks, so the fp32 sum over the blocks errs by at most
# 2^14 * 2^-24 = 2^-10 of the sum of the terms' magnitudes (under the bf16 output's own rounding), and within the
# 21-bit dimensions / 32-bit sizes of the CUDA kernels (the ROCm kernels allow up to 65535 K blocks).
MAX_K = 2**21 - 1

_LOGICAL = {
    "a": "(M, K)",
    "b": "(N, K)",
    "a_scale": "(M, ceil(K/128))",
    "b_scale": "(ceil(N/128), ceil(K/128))",
    "out": "(M, N)",
}


def _blocks(x):
    return (x + QUANT_BLOCK - 1) // QUANT_BLOCK


def _shape(t_or_sizes):
    sizes = t_or_sizes.shape if isinstance(t_or_sizes, torch.Tensor) else t_or_sizes
    return "[" + ", ".join(str(int(s)) for s in sizes) + "]"


def _strides(t):
    return "[" + ", ".join(str(int(s)) for s in t.stride()) + "]"


def check_tensor(t, name, op="gemm"):
    if not isinstance(t, torch.Tensor):
        got = "None" if t is None else type(t).__name__
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {got}")


def _scale_hint(t, name, logical):
    """For a 0-D scale: per-tensor scaling is not a mode of its own; an expand()ed view of it is."""
    if t.dim() != 0:
        return ""
    return (
        f" (hint: per-tensor scaling is not supported as such; pass the one scale as a block scale of logical shape "
        f"{logical}, e.g. {name}.expand{logical}, a view that costs no copy)"
    )


def check_2d(t, name):
    check_tensor(t, name)
    if t.dim() != 2:
        raise RuntimeError(
            f"gemm: {name} must be a 2-D tensor of logical shape {_LOGICAL[name]}, got a {t.dim()}-D tensor of "
            f"shape {_shape(t)}" + (_scale_hint(t, name, _LOGICAL[name]) if name.endswith("scale") else "")
        )


def check_k(op, k, what):
    if k > MAX_K:
        raise RuntimeError(
            f"{op}: K must be at most {MAX_K} (2^21 - 1: the longest sum every backend accumulates faithfully in "
            f"fp32 and indexes), got K = {k} ({what}); split K into several calls and add their outputs"
        )


def _transpose_hint(a, b, a_scale, b_scale):
    # The scales are taken as the truth; out is left out (the wrapper may have allocated it from the wrong shapes).
    for ta, tb in ((True, False), (False, True), (True, True)):
        m, k = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
        n, k_b = (b.shape[1], b.shape[0]) if tb else (b.shape[0], b.shape[1])
        if (
            k == k_b
            and tuple(a_scale.shape) == (m, _blocks(k))
            and tuple(b_scale.shape) == (_blocks(n), _blocks(k))
        ):
            if ta and tb:
                what = "a and b look like the physical (K, M) and (K, N) tensors of the seed tutorial; pass a.T and b.T"
            elif ta:
                what = "a looks like a physical (K, M) tensor (the seed tutorial's layout); pass a.T"
            else:
                what = "b looks like a physical (K, N) tensor (the seed tutorial's layout); pass b.T"
            return f" (hint: {what}, transposed views that cost no copy; any strides are accepted)"
    return ""


def strides_do_not_self_overlap(t):
    """True when the strides alone show that no two elements of ``t`` share memory: the dimensions of
    extent > 1, ordered by stride, each step past everything the smaller ones span. Anything else (an
    expand()ed tensor, rows that interleave) counts as overlapping, whether or not two elements collide."""
    span = 0
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1):
        if stride <= span:
            return False
        span += stride * (size - 1)
    return True


def _byte_range(t):
    """For a 2-D tensor: (storage key, first byte, one past the last byte) of the memory ``t``'s elements span, or None
    when it cannot be known here. Real tensors are compared by address (two storages may view the same
    memory, e.g. two torch.from_numpy of one array); meta and fake tensors, which have no memory, by
    storage identity and offset."""
    if t.numel() == 0:
        return None
    (rows, cols), (row_stride, col_stride) = t.shape, t.stride()
    last = (rows - 1) * row_stride + (cols - 1) * col_stride
    item = t.element_size()
    try:
        storage = t.untyped_storage()
        if t.is_meta or isinstance(t, FakeTensor):
            key, begin = storage._cdata, t.storage_offset() * item
        else:
            key, begin = None, t.data_ptr()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage: the op itself checks
        return None
    return key, begin, begin + (last + 1) * item


def _intersect(x, y):
    return x is not None and y is not None and x[0] == y[0] and x[1] < y[2] and y[1] < x[2]


def check_inputs(out, a, b, a_scale, b_scale):
    """Raise TypeError/RuntimeError naming the argument, the expected and the received value."""
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale), ("out", out)):
        check_2d(t, name)
    if a.dtype not in FP8_DTYPES:
        raise RuntimeError(f"gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got {a.dtype}")
    if b.dtype != a.dtype:
        raise RuntimeError(
            f"gemm: b must have the same dtype as a ({a.dtype}), got {b.dtype}; mixing fp8 kinds is not supported, "
            "convert one of them"
        )
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        if t.dtype not in SCALE_DTYPES:
            raise RuntimeError(f"gemm: {name} must be torch.float32 or torch.float8_e8m0fnu, got {t.dtype}")
    if out.dtype != torch.bfloat16:
        raise RuntimeError(f"gemm: out must be torch.bfloat16, got {out.dtype}")
    for name, t in (("b", b), ("a_scale", a_scale), ("b_scale", b_scale), ("out", out)):
        if t.device != a.device:
            raise RuntimeError(
                f"gemm: all tensors must be on the same device; a is on {a.device} but {name} is on {t.device}"
            )
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise RuntimeError(
            f"gemm: a (M, K) and b (N, K) must have the same K, got a of shape {_shape(a)} (K = {k}) and b of shape "
            f"{_shape(b)} (K = {b.shape[1]})" + _transpose_hint(a, b, a_scale, b_scale)
        )
    check_k("gemm", k, f"a of shape {_shape(a)}")
    kb, nb = _blocks(k), _blocks(n)
    if tuple(a_scale.shape) != (m, kb):
        raise RuntimeError(
            f"gemm: a_scale must have shape (M, ceil(K/128)) = {_shape((m, kb))} for a of shape {_shape(a)}, got "
            f"{_shape(a_scale)}" + _transpose_hint(a, b, a_scale, b_scale)
        )
    if tuple(b_scale.shape) != (nb, kb):
        raise RuntimeError(
            f"gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = {_shape((nb, kb))} for b of shape "
            f"{_shape(b)}, got {_shape(b_scale)}" + _transpose_hint(a, b, a_scale, b_scale)
        )
    if tuple(out.shape) != (m, n):
        raise RuntimeError(
            f"gemm: out must have shape (M, N) = {_shape((m, n))}, got {_shape(out)}"
            + _transpose_hint(a, b, a_scale, b_scale)
        )
    if out.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            "gemm: out must not require grad: the op writes into it in place and has no backward "
            "(pass out.detach(), or call it under torch.no_grad())"
        )
    if not strides_do_not_self_overlap(out):
        raise RuntimeError(
            f"gemm: out must not overlap itself, got strides {_strides(out)} for shape {_shape(out)}: two elements "
            "may share memory (e.g. an expand()ed tensor)"
        )
    out_range = _byte_range(out)
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        if _intersect(out_range, _byte_range(t)):
            raise RuntimeError(f"gemm: out must not overlap {name} in memory (the bytes they span intersect)")


# ----------------------------------------------------------------------------------------------------
# fp8_act_quant and matmul_2d

ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_ROWS = 2**31 - 1  # rows of the quantization (the product of the leading sizes) the kernels index


def _rows(x):
    rows = 1
    for size in x.shape[:-1]:
        rows = rows * size
    return rows


def _check_activations(op, x, name):
    check_tensor(x, name, op)
    if x.dim() < 1:
        raise RuntimeError(f"{op}: {name} must have at least one dimension (logical shape (..., K)), got a 0-D tensor")
    if x.dtype not in ACT_DTYPES:
        raise RuntimeError(f"{op}: {name} must be torch.bfloat16, torch.float16 or torch.float32, got {x.dtype}")
    if _rows(x) > MAX_ROWS:
        raise RuntimeError(
            f"{op}: {name} of shape {_shape(x)} has {_rows(x)} rows (the product of its leading sizes); at most "
            f"{MAX_ROWS} are supported"
        )


def _check_activation_scale(op, activation_scale, x, name, activation_scale_value=None):
    """None, a Python float (or int), or a one-element float32 tensor on x's device. The raw ops take a float
    as a separate argument (activation_scale_value): at most one of the two may be given."""
    if activation_scale is None:
        return
    if activation_scale_value is not None:
        raise RuntimeError(
            f"{op}: activation_scale_value must be None when activation_scale is a tensor (pass one of them)"
        )
    if isinstance(activation_scale, bool) or not isinstance(activation_scale, (int, float, torch.Tensor)):
        raise TypeError(
            f"{op}: activation_scale must be None, a Python float or a one-element torch.float32 tensor, got "
            f"{type(activation_scale).__name__}"
        )
    if not isinstance(activation_scale, torch.Tensor):
        return
    if activation_scale.dtype != torch.float32:
        raise RuntimeError(f"{op}: activation_scale must be torch.float32, got {activation_scale.dtype}")
    if activation_scale.numel() != 1:
        raise RuntimeError(
            f"{op}: activation_scale must have exactly one element (a per-tensor scale), got shape "
            f"{_shape(activation_scale)}"
        )
    if activation_scale.device != x.device:
        raise RuntimeError(
            f"{op}: all tensors must be on the same device; {name} is on {x.device} but activation_scale is on "
            f"{activation_scale.device}"
        )


def check_act_quant(x, block_size, dtype, activation_scale, activation_scale_value=None):
    """fp8_act_quant's arguments; TypeError/RuntimeError naming the argument, the expected and the received value."""
    _check_activations("fp8_act_quant", x, "x")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size != QUANT_BLOCK:
        raise RuntimeError(
            f"fp8_act_quant: block_size must be {QUANT_BLOCK} (the only group width the kernels implement), got "
            f"{block_size!r}"
        )
    if dtype not in FP8_DTYPES:
        raise RuntimeError(f"fp8_act_quant: dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype}")
    _check_activation_scale("fp8_act_quant", activation_scale, x, "x", activation_scale_value)


def _block_size_str(block_size):
    if isinstance(block_size, (list, tuple)):
        return "[" + ", ".join(repr(b) for b in block_size) + "]"
    return repr(block_size)


def check_matmul_2d(a, b, b_scale, block_size, output_dtype, activation_scale, activation_scale_value=None):
    """matmul_2d's arguments (A, B, Bs in the messages: the names of the Python API)."""
    op = "matmul_2d"
    for name, t in (("A", a), ("B", b), ("Bs", b_scale)):
        check_tensor(t, name, op)
    _check_activations(op, a, "A")
    if b.dim() != 2:
        raise RuntimeError(
            f"{op}: B must be a 2-D tensor of logical shape (N, K), got a {b.dim()}-D tensor of shape {_shape(b)}"
        )
    if b.dtype not in FP8_DTYPES:
        raise RuntimeError(f"{op}: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {b.dtype}")
    if b_scale.dim() != 2:
        raise RuntimeError(
            f"{op}: Bs must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a {b_scale.dim()}-D "
            f"tensor of shape {_shape(b_scale)}" + _scale_hint(b_scale, "Bs", "(ceil(N/128), ceil(K/128))")
        )
    if b_scale.dtype not in SCALE_DTYPES:
        raise RuntimeError(f"{op}: Bs must be torch.float32 or torch.float8_e8m0fnu, got {b_scale.dtype}")
    _check_blocking_and_output(op, block_size, output_dtype)
    for name, t in (("B", b), ("Bs", b_scale)):
        if t.device != a.device:
            raise RuntimeError(
                f"{op}: all tensors must be on the same device; A is on {a.device} but {name} is on {t.device}"
            )
    k, n = a.shape[-1], b.shape[0]
    if b.shape[1] != k:
        raise RuntimeError(
            f"{op}: A (..., K) and B (N, K) must have the same K, got A of shape {_shape(a)} (K = {k}) and B of "
            f"shape {_shape(b)} (K = {b.shape[1]})"
        )
    check_k(op, k, f"A of shape {_shape(a)}")
    if tuple(b_scale.shape) != (_blocks(n), _blocks(k)):
        raise RuntimeError(
            f"{op}: Bs must have shape (ceil(N/128), ceil(K/128)) = {_shape((_blocks(n), _blocks(k)))} for B of "
            f"shape {_shape(b)}, got {_shape(b_scale)}"
        )
    _check_activation_scale(op, activation_scale, a, "A", activation_scale_value)


# ----------------------------------------------------------------------------------------------------
# matmul_batched and matmul_grouped (the MoE expert GEMMs)

INDEX_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
COUNT_DTYPES = INDEX_DTYPES + (torch.float32, torch.float64)


def _check_dims(op, t, name, dims, logical):
    if t.dim() != dims:
        raise RuntimeError(
            f"{op}: {name} must be a {dims}-D tensor of logical shape {logical}, got a {t.dim()}-D tensor of shape "
            f"{_shape(t)}"
        )


def _check_blocking_and_output(op, block_size, output_dtype):
    """block_size and output_dtype of matmul_2d and the expert GEMMs."""
    if not (
        isinstance(block_size, (list, tuple))
        and len(block_size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s == QUANT_BLOCK for s in block_size)
    ):
        raise RuntimeError(
            f"{op}: block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only "
            f"blocking the kernels implement), got {_block_size_str(block_size)}"
        )
    if output_dtype is not None and output_dtype not in ACT_DTYPES:
        raise RuntimeError(
            f"{op}: output_dtype must be None, torch.bfloat16, torch.float16 or torch.float32, got {output_dtype}"
        )


def _check_expert_operands(op, a, b, b_scale, block_size, output_dtype):
    _check_dims(op, a, "A", 2, "(S, K)")
    if a.dtype not in ACT_DTYPES:
        raise RuntimeError(f"{op}: A must be torch.bfloat16, torch.float16 or torch.float32, got {a.dtype}")
    if a.shape[0] > MAX_ROWS:
        raise RuntimeError(f"{op}: A of shape {_shape(a)} has {a.shape[0]} rows; at most {MAX_ROWS} are supported")
    _check_dims(op, b, "B", 3, "(E, N, K)")
    if b.dtype not in FP8_DTYPES:
        raise RuntimeError(f"{op}: B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {b.dtype}")
    _check_dims(op, b_scale, "Bs", 3, "(E, ceil(N/128), ceil(K/128))")
    if b_scale.dtype not in SCALE_DTYPES:
        raise RuntimeError(f"{op}: Bs must be torch.float32 or torch.float8_e8m0fnu, got {b_scale.dtype}")
    _check_blocking_and_output(op, block_size, output_dtype)


def _check_expert_shapes(op, a, b, b_scale):
    k = a.shape[1]
    e, n = b.shape[0], b.shape[1]
    if b.shape[2] != k:
        raise RuntimeError(
            f"{op}: A (S, K) and B (E, N, K) must have the same K, got A of shape {_shape(a)} (K = {k}) and B of "
            f"shape {_shape(b)} (K = {b.shape[2]})"
        )
    check_k(op, k, f"A of shape {_shape(a)}")
    expected = (e, _blocks(n), _blocks(k))
    if tuple(b_scale.shape) != expected:
        raise RuntimeError(
            f"{op}: Bs must have shape (E, ceil(N/128), ceil(K/128)) = {_shape(expected)} for B of shape "
            f"{_shape(b)}, got {_shape(b_scale)}"
        )


def _check_same_device(op, a, others):
    for name, t in others:
        if t.device != a.device:
            raise RuntimeError(
                f"{op}: all tensors must be on the same device; A is on {a.device} but {name} is on {t.device}"
            )


def _check_length(op, t, name, logical, expected, source, source_tensor):
    if t.shape[0] != expected:
        raise RuntimeError(
            f"{op}: {name} must have shape {logical} = {_shape((expected,))} for {source} of shape "
            f"{_shape(source_tensor)}, got {_shape(t)}"
        )


def check_matmul_batched(a, b, b_scale, expert_ids, block_size, output_dtype):
    """matmul_batched's arguments (shapes, dtypes, devices; the ids' values are never an error)."""
    op = "matmul_batched"
    for name, t in (("A", a), ("B", b), ("Bs", b_scale), ("expert_ids", expert_ids)):
        check_tensor(t, name, op)
    _check_expert_operands(op, a, b, b_scale, block_size, output_dtype)
    _check_dims(op, expert_ids, "expert_ids", 1, "(S,)")
    if expert_ids.dtype not in INDEX_DTYPES:
        raise RuntimeError(
            f"{op}: expert_ids must be an integer tensor (torch.int8, torch.uint8, torch.int16, torch.int32 or "
            f"torch.int64), got {expert_ids.dtype}"
        )
    _check_same_device(op, a, (("B", b), ("Bs", b_scale), ("expert_ids", expert_ids)))
    _check_expert_shapes(op, a, b, b_scale)
    _check_length(op, expert_ids, "expert_ids", "(S,)", a.shape[0], "A", a)


def check_matmul_grouped(a, b, b_scale, offsets, tokens_per_expert, block_size, output_dtype):
    """matmul_grouped's arguments (shapes, dtypes, devices). The values of offsets and tokens_per_expert are
    checked by the CPU backend only (torch_binding.cpp): on a GPU that would cost a host synchronisation."""
    op = "matmul_grouped"
    for name, t in (
        ("A", a), ("B", b), ("Bs", b_scale), ("offsets", offsets), ("tokens_per_expert", tokens_per_expert)
    ):
        check_tensor(t, name, op)
    _check_expert_operands(op, a, b, b_scale, block_size, output_dtype)
    _check_dims(op, offsets, "offsets", 1, "(E,)")
    if offsets.dtype != torch.int32:
        raise RuntimeError(f"{op}: offsets must be torch.int32, got {offsets.dtype}")
    _check_dims(op, tokens_per_expert, "tokens_per_expert", 1, "(E,)")
    if tokens_per_expert.dtype not in COUNT_DTYPES:
        raise RuntimeError(
            f"{op}: tokens_per_expert must be an integer tensor, torch.float32 or torch.float64, got "
            f"{tokens_per_expert.dtype}"
        )
    _check_same_device(
        op, a, (("B", b), ("Bs", b_scale), ("offsets", offsets), ("tokens_per_expert", tokens_per_expert))
    )
    _check_expert_shapes(op, a, b, b_scale)
    _check_length(op, offsets, "offsets", "(E,)", b.shape[0], "B", b)
    _check_length(op, tokens_per_expert, "tokens_per_expert", "(E,)", b.shape[0], "B", b)


def quantized_layout(x_shape, dtype, device):
    """The outputs of fp8_act_quant for x of shape (..., K): q (..., K) contiguous in `dtype`, and the
    float32 scales of logical shape (..., ceil(K/128)) stored M-contiguous: element (r, g) of the rows
    flattened at r + g * ceil4(M) (the layout the sm90 GEMM kernels read in place)."""
    lead = list(x_shape[:-1])
    rows = 1
    strides = []
    for size in reversed(lead):
        strides.append(rows)
        rows = rows * size
    ld = (rows + 3) // 4 * 4
    q = torch.empty(tuple(x_shape), dtype=dtype, device=device)
    scale = torch.empty_strided(
        tuple(lead) + (_blocks(x_shape[-1]),), tuple(reversed(strides)) + (ld,), dtype=torch.float32, device=device
    )
    return q, scale
