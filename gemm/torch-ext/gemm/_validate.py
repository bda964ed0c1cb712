"""Argument checks of the gemm op, for the fake (meta) implementation and the Python wrapper.

They mirror check_inputs() in torch_binding.cpp message for message, so torch.compile tracing and
meta tensors report the same errors as an eager call on a real device.
"""
import torch

QUANT_BLOCK = 128
FP8_DTYPES = (torch.float8_e4m3fnuz, torch.float8_e4m3fn)

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


def check_2d(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"gemm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise RuntimeError(
            f"gemm: {name} must be a 2-D tensor of logical shape {_LOGICAL[name]}, got a {t.dim()}-D tensor of "
            f"shape {_shape(t)}"
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


def check_inputs(out, a, b, a_scale, b_scale):
    """Raise RuntimeError (TypeError for non-tensors) naming the argument, the expected and the received value."""
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
        if t.dtype != torch.float32:
            raise RuntimeError(f"gemm: {name} must be torch.float32, got {t.dtype}")
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
