"""Exact NumPy reference of fp8_act_quant, written from the definition in gemm/README.md (section
"Fine-grained FP8"), not from any kernel.

For every row of x (leading dimensions flattened) and 128-wide group of K (a partial last group uses
only its real columns), in float32:
    amax  = max |x| over the group (NaN propagates)
    scale = max(amax / fp8_max, 1e-12), NaN stays NaN           (or the static per-tensor scale)
    q     = fp8 code of clamp(x / scale, -fp8_max, fp8_max), round to nearest, ties to the even code
with the sign of q the sign of x / scale by IEEE's rule (sign(x) XOR sign(scale)), NaN codes included.

The rounding is done by searching the table of the 128 non-negative fp8 values in float64 (every fp8
value and every float32 quotient is exact there), so it shares no bit manipulation with the kernels.

API:
    act_quant_ref(x, kind, static_scale=None) -> (q uint8 (M, K), scale float32 (M, G))
        x: float32 array (M, K); kind: "e4m3fn" or "e4m3fnuz"
    fp8_values(kind) -> float64 values of the codes 0..127 (NaN for e4m3fn's 0x7F)
    special_values(dtype, device) -> a (6, 300) torch input of NaN, +-inf, zeros, -0 and overflowing groups
"""
import numpy as np

GROUP = 128
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 240.0}
KINDS = tuple(FP8_MAX)


def fp8_values(kind):
    """Value of each code 0..127 from the format's definition (sign bit clear)."""
    bias = {"e4m3fn": 7, "e4m3fnuz": 8}[kind]
    codes = np.arange(128)
    exponent, mantissa = codes >> 3, codes & 7
    values = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** (1 - bias), (1.0 + mantissa / 8.0) * 2.0 ** (exponent - bias))
    if kind == "e4m3fn":
        values[0x7F] = np.nan  # S.1111.111
    return values


def encode(v, neg, kind):
    """fp8 codes (uint8) of the float32 quotients v, with sign bits neg (bool array, same shape)."""
    v = np.asarray(v, dtype=np.float32)
    table = fp8_values(kind)
    finite = table[~np.isnan(table)]  # ascending: codes 0..126 (e4m3fn) or 0..127 (e4m3fnuz)
    top = len(finite) - 1
    a = np.minimum(np.abs(v.astype(np.float64)), FP8_MAX[kind])  # NaN stays NaN
    nan = np.isnan(a)
    a = np.where(nan, 0.0, a)
    hi = np.clip(np.searchsorted(finite, a, side="left"), 0, top)  # first value >= a
    lo = np.clip(hi - 1, 0, top)
    d_lo, d_hi = a - finite[lo], finite[hi] - a
    # Nearest; a tie goes to the even code (the code's last bit is the mantissa's).
    code = np.where(d_hi < d_lo, hi, np.where(d_lo < d_hi, lo, np.where(hi % 2 == 0, hi, lo))).astype(np.uint8)
    sign = np.where(neg, np.uint8(0x80), np.uint8(0))
    if kind == "e4m3fn":
        return np.where(nan, np.uint8(0x7F) | sign, code | sign).astype(np.uint8)
    # e4m3fnuz: 0x80 is the only NaN, and there is no -0.
    return np.where(nan, np.uint8(0x80), np.where(code == 0, np.uint8(0), code | sign)).astype(np.uint8)


def act_quant_ref(x, kind, static_scale=None):
    x = np.asarray(x, dtype=np.float32)
    m, k = x.shape
    groups = -(-k // GROUP)
    q = np.empty((m, k), dtype=np.uint8)
    scale = np.empty((m, groups), dtype=np.float32)
    fp8_max = np.float32(FP8_MAX[kind])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for g in range(groups):
            cols = slice(g * GROUP, min(k, (g + 1) * GROUP))
            block = x[:, cols]
            if static_scale is None:
                s = np.abs(block).max(axis=1) / fp8_max  # float32 / float32: one IEEE rounding
                s = np.where(np.isnan(s), np.float32(np.nan), np.maximum(s, np.float32(1e-12))).astype(np.float32)
            else:
                s = np.full(m, static_scale, dtype=np.float32)
            quotient = (block / s[:, None]).astype(np.float32)
            neg = np.signbit(block) ^ np.signbit(s)[:, None]
            q[:, cols] = encode(quotient, neg, kind)
            scale[:, g] = s
    return q, scale


def special_values(dtype, device="cpu"):
    """(6, 300) groups with NaN, +-inf, all zeros, -0, a NaN next to an inf, values past the fp8 range."""
    import torch  # only the test inputs need torch; the reference itself is NumPy

    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(1))
    x[0, 17] = float("nan")
    x[1, 5], x[1, 200] = float("inf"), float("-inf")
    x[2, :128] = 0.0
    x[2, 128:256] = -0.0
    x[3, 10], x[3, 11] = float("inf"), float("nan")
    x[4, 256:] = 0.0
    x[4, 299] = -float("nan")
    x[5] = x[5] * 1e30 if dtype != torch.float16 else x[5] * 1e4
    return x.to(dtype).to(device)
