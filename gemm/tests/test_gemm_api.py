"""The op's torch surface on every device it is built for: allocation, empty problems, the fake
implementation, opcheck, torch.compile and the kernelize layer."""
import pytest
import torch

import gemm
from gemm.layers import Fp8BlockLinear, quantize_activations
from reference import FP8_DTYPES, assert_close_fp8_tensor_core, make_inputs, poisoned_out, reference_gemm

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(
        not (torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)),
        reason="needs a CUDA device of compute capability 9.0")),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def test_allocates_out_when_none(device):
    a, b, a_scale, b_scale = make_inputs(70, 200, 300, seed=5, device=device)
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (70, 200) and out.device == a.device
    assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale)


@pytest.mark.parametrize("m,n", [(0, 5), (5, 0), (0, 0)])
def test_empty_m_or_n(device, m, n):
    a, b, a_scale, b_scale = make_inputs(m, n, 200, seed=1, device=device)
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert tuple(out.shape) == (m, n)


def test_k_zero_gives_zeros(device):
    m, n = 3, 200
    a = torch.empty(m, 0, dtype=torch.float8_e4m3fnuz, device=device)
    b = torch.empty(n, 0, dtype=torch.float8_e4m3fnuz, device=device)
    out = poisoned_out(m, n, device)
    gemm.gemm(a, b, torch.empty(m, 0, device=device), torch.empty(2, 0, device=device), out=out)
    assert torch.equal(out.cpu(), torch.zeros(m, n, dtype=torch.bfloat16))


def test_opcheck(device, monkeypatch):
    # opcheck's schema check compares arguments before/after with torch.allclose, which has no fp8
    # kernel; compare fp8 tensors bitwise instead (as vLLM's opcheck wrapper does).
    allclose = torch.allclose

    def allclose_fp8_aware(lhs, rhs, *args, **kwargs):
        if lhs.dtype in FP8_DTYPES or rhs.dtype in FP8_DTYPES:
            return lhs.dtype == rhs.dtype and torch.equal(lhs.view(torch.uint8), rhs.view(torch.uint8))
        return allclose(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose_fp8_aware)
    for m, n, k, layout in ((33, 130, 200, "mn_major"), (1, 1, 1, "k_major")):
        a, b, a_scale, b_scale = make_inputs(m, n, k, layout=layout, seed=2, device=device)
        torch.library.opcheck(gemm.ops.gemm.default, (poisoned_out(m, n, device), a, b, a_scale, b_scale))


def test_torch_compile_fullgraph(device):
    a, b, a_scale, b_scale = make_inputs(64, 192, 384, seed=9, device=device)

    # Only the op and views in the graph: inductor then has no kernels of its own to compile (CI time).
    @torch.compile(fullgraph=True)
    def compiled(a, b, a_scale, b_scale):
        return gemm.gemm(a, b, a_scale, b_scale).T

    assert_close_fp8_tensor_core(compiled(a, b, a_scale, b_scale).T, a, b, a_scale, b_scale)
    # out= form: the mutation must survive functionalization.
    out = poisoned_out(64, 192, device)
    torch.compile(gemm.gemm, fullgraph=True)(a, b, a_scale, b_scale, out=out)
    assert_close_fp8_tensor_core(out, a, b, a_scale, b_scale)


def test_torch_compile_dynamic_shapes(device):
    # Symbolic M (and N): the fake implementation's checks must trace without specialising on them.
    compiled = torch.compile(gemm.gemm, fullgraph=True, dynamic=True)
    for m, n in ((17, 130), (40, 300)):
        a, b, a_scale, b_scale = make_inputs(m, n, 256, seed=m, device=device)
        assert_close_fp8_tensor_core(compiled(a, b, a_scale, b_scale), a, b, a_scale, b_scale)


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b, a_scale, b_scale = make_inputs(48, 576, 7168, device="cpu")
        out = gemm.gemm(a, b, a_scale, b_scale)
        assert tuple(out.shape) == (48, 576) and out.dtype == torch.bfloat16


def test_meta_tensors():
    a, b, a_scale, b_scale = (t.to("meta") for t in make_inputs(48, 576, 7168))
    out = gemm.gemm(a, b, a_scale, b_scale)
    assert out.device.type == "meta" and tuple(out.shape) == (48, 576) and out.dtype == torch.bfloat16


# ------------------------------------------------------------------------------------------------------
# gemm.layers.Fp8BlockLinear, the kernelize layer.

class _Host(torch.nn.Module):
    """What kernelize hands the layer's forward: a module with the FP8 linear's attributes."""

    def __init__(self, n, k, dtype, bias, device, seed):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(seed)
        self.weight = torch.randn(n, k, generator=gen, device=device).to(dtype)
        kb, nb = (k + 127) // 128, (n + 127) // 128
        self.weight_scale_inv = torch.rand(nb, kb, generator=gen, device=device) + 0.5
        self.bias = torch.randn(n, generator=gen, device=device) if bias else None

    def forward(self, x):
        return Fp8BlockLinear.forward(self, x)


def _layer_reference(host, x):
    """float64: the activations quantised the layer's way, the block-scaled product, the bias."""
    n, k = host.weight.shape
    q, scale = quantize_activations(x.reshape(-1, k), host.weight.dtype)
    y = reference_gemm(q, host.weight, scale, host.weight_scale_inv)
    if host.bias is not None:
        y = y + host.bias.cpu().double()
    return y.reshape(*x.shape[:-1], n)


@pytest.mark.parametrize("k", [300, 129, 1000, 7000, 128, 1])
def test_fp8_block_linear_quantization(k, device):
    # Every activation group's scale is amax / fp8_max, and dequantised activations are within one fp8
    # rounding of the input; the layer's output is the block-scaled product of those.
    dtype = FP8_DTYPES[1] if device == "cuda" else FP8_DTYPES[0]
    x = torch.randn(5, k, device=device) * torch.linspace(0.01, 100, k, device=device)
    q, scale = quantize_activations(x, dtype)
    assert q.shape == (5, k) and scale.shape == (5, (k + 127) // 128)
    groups = torch.nn.functional.pad(x.abs(), (0, scale.shape[1] * 128 - k)).view(5, -1, 128).amax(-1)
    torch.testing.assert_close(scale, groups.clamp_min(1e-12) / torch.finfo(dtype).max, rtol=0, atol=0)
    back = q.float() * scale.repeat_interleave(128, dim=1)[:, :k]
    assert ((back - x).abs() <= x.abs() * 2.0 ** -3 + scale.repeat_interleave(128, dim=1)[:, :k] * 2.0 ** -6).all()
    host = _Host(256, k, dtype, bias=True, device=device, seed=k)
    torch.testing.assert_close(host(x).double().cpu(), _layer_reference(host, x), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("k,dynamic", [(300, False), (7000, False), (300, True)])
def test_fp8_block_linear_compiles_like_eager(k, dynamic, device):
    # K % 128 != 0: the last activation group is partial. Compiled and eager must agree bit for bit, with
    # static shapes (a fresh compilation, not one made dynamic by an earlier test) and with dynamic ones.
    torch._dynamo.reset()
    host = _Host(256, k, FP8_DTYPES[1], bias=False, device=device, seed=k)
    compiled = torch.compile(host, fullgraph=True, dynamic=dynamic)
    for shape in ((4, 3, k), (1, k), (16, k)):
        x = torch.randn(*shape, device=device)
        got = compiled(x)
        assert not got.isnan().any()
        assert torch.equal(got, host(x))


def test_fp8_block_linear_rejects_wrong_features():
    host = _Host(128, 256, FP8_DTYPES[1], bias=False, device="cpu", seed=0)
    with pytest.raises(RuntimeError, match=r"Fp8BlockLinear: input must have 256 features in its last dimension, "
                                           r"got shape \[2, 255\]"):
        host(torch.randn(2, 255))
