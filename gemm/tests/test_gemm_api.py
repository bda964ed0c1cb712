"""The gemm op's torch surface on every device it is built for: allocation, empty problems, the fake
implementation, opcheck and torch.compile (fp8_act_quant, matmul_2d and the kernelize layer:
test_act_quant.py)."""
import pytest
import torch

import gemm
from reference import FP8_DTYPES, assert_close_fp8_tensor_core, make_inputs, poisoned_out

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
