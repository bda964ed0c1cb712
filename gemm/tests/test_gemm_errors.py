"""Every bad input is a RuntimeError naming the argument, the expected and the received value.

Each case runs on "cpu" (the C++ checks of torch_binding.cpp, then the CPU backend) and on "meta"
(the fake implementation used by torch.compile / meta tensors), which must say the same thing.
"""
import re

import pytest
import torch

import gemm
from reference import make_inputs, reference_gemm, assert_close_challenge

M, N, K = 64, 200, 300  # ceil(K/128) = 3, ceil(N/128) = 2
DEVICES = ["cpu", "meta"]


def valid(device, m=M, n=N, k=K, dtype=torch.float8_e4m3fnuz):
    a, b, a_scale, b_scale = make_inputs(m, n, k, dtype, "k_major", seed=0)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    return {name: t.to(device) for name, t in dict(out=out, a=a, b=b, a_scale=a_scale, b_scale=b_scale).items()}


def call(args):
    return gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"], out=args["out"])


def expect_error(args, message, exc=RuntimeError):
    with pytest.raises(exc, match=re.escape(message)):
        call(args)


@pytest.mark.parametrize("device", DEVICES)
def test_a_bfloat16(device):
    args = valid(device)
    args["a"] = args["a"].to(torch.bfloat16)
    expect_error(args, "gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got torch.bfloat16")


@pytest.mark.parametrize("device", DEVICES)
def test_a_other_fp8_kind(device):
    args = valid(device)
    args["a"] = args["a"].to(torch.float32).to(torch.float8_e5m2)
    expect_error(args, "gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got torch.float8_e5m2")


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_fp8_kinds(device):
    args = valid(device)
    args["b"] = args["b"].to(torch.float32).to(torch.float8_e4m3fn)
    expect_error(
        args,
        "gemm: b must have the same dtype as a (torch.float8_e4m3fnuz), got torch.float8_e4m3fn; mixing fp8 kinds",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_out_float16(device):
    args = valid(device)
    args["out"] = args["out"].to(torch.float16)
    expect_error(args, "gemm: out must be torch.bfloat16, got torch.float16")


@pytest.mark.parametrize("device", DEVICES)
def test_a_scale_bfloat16(device):
    args = valid(device)
    args["a_scale"] = args["a_scale"].to(torch.bfloat16)
    expect_error(args, "gemm: a_scale must be torch.float32, got torch.bfloat16")


@pytest.mark.parametrize("device", DEVICES)
def test_b_scale_float64(device):
    args = valid(device)
    args["b_scale"] = args["b_scale"].to(torch.float64)
    expect_error(args, "gemm: b_scale must be torch.float32, got torch.float64")


@pytest.mark.parametrize("device", DEVICES)
def test_a_scale_disagrees_with_k(device):
    args = valid(device)
    args["a_scale"] = torch.ones(M, 4, device=device)
    expect_error(args, "gemm: a_scale must have shape (M, ceil(K/128)) = [64, 3] for a of shape [64, 300], got [64, 4]")


@pytest.mark.parametrize("device", DEVICES)
def test_a_scale_disagrees_with_m(device):
    args = valid(device)
    args["a_scale"] = torch.ones(M + 1, 3, device=device)
    expect_error(args, "gemm: a_scale must have shape (M, ceil(K/128)) = [64, 3] for a of shape [64, 300], got [65, 3]")


@pytest.mark.parametrize("device", DEVICES)
def test_b_scale_disagrees_with_n(device):
    args = valid(device)
    args["b_scale"] = torch.ones(1, 3, device=device)  # N = 200 needs 2 blocks
    expect_error(
        args,
        "gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = [2, 3] for b of shape [200, 300], got [1, 3]",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_b_scale_disagrees_with_k(device):
    args = valid(device)
    args["b_scale"] = torch.ones(2, 2, device=device)
    expect_error(
        args,
        "gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = [2, 3] for b of shape [200, 300], got [2, 2]",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_a_b_k_mismatch(device):
    args = valid(device)
    args["b"] = valid(device, k=K + 1)["b"]
    expect_error(
        args,
        "gemm: a (M, K) and b (N, K) must have the same K, got a of shape [64, 300] (K = 300) and b of shape "
        "[200, 301] (K = 301)",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_out_wrong_shape(device):
    args = valid(device)
    args["out"] = torch.empty(N, M, dtype=torch.bfloat16, device=device)
    expect_error(args, "gemm: out must have shape (M, N) = [64, 200], got [200, 64]")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["a_scale", "out"])
def test_tensors_on_different_devices(device, name):
    # The only second device on a CPU-only machine is "meta"; GPU test suites cover cuda/cpu mixes.
    other = "meta" if device == "cpu" else "cpu"
    args = valid(device)
    args[name] = torch.empty_like(args[name], device=other)
    a_dev = torch.device(device)
    expect_error(args, f"gemm: all tensors must be on the same device; a is on {a_dev} but {name} is on {other}")


@pytest.mark.parametrize("device", DEVICES)
def test_1d_a(device):
    args = valid(device)
    args["a"] = args["a"].reshape(-1)
    expect_error(args, "gemm: a must be a 2-D tensor of logical shape (M, K), got a 1-D tensor of shape [19200]")
    # Without out=, the wrapper must fail just as clearly before it infers the output shape.
    with pytest.raises(RuntimeError, match=re.escape("gemm: a must be a 2-D tensor of logical shape (M, K)")):
        gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"])


@pytest.mark.parametrize("device", DEVICES)
def test_3d_b(device):
    args = valid(device)
    args["b"] = args["b"].reshape(2, 100, K)
    expect_error(args, "gemm: b must be a 2-D tensor of logical shape (N, K), got a 3-D tensor of shape [2, 100, 300]")
    with pytest.raises(RuntimeError, match=re.escape("gemm: b must be a 2-D tensor of logical shape (N, K)")):
        gemm.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"])


@pytest.mark.parametrize("device", DEVICES)
def test_3d_a_scale(device):
    args = valid(device)
    args["a_scale"] = args["a_scale"].unsqueeze(0)
    expect_error(
        args,
        "gemm: a_scale must be a 2-D tensor of logical shape (M, ceil(K/128)), got a 3-D tensor of shape [1, 64, 3]",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_1d_b_scale(device):
    args = valid(device)
    args["b_scale"] = args["b_scale"].reshape(-1)
    expect_error(
        args,
        "gemm: b_scale must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a 1-D tensor of shape [6]",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_1d_out(device):
    args = valid(device)
    args["out"] = args["out"].reshape(-1)
    expect_error(args, "gemm: out must be a 2-D tensor of logical shape (M, N), got a 1-D tensor of shape [12800]")


def test_not_a_tensor():
    args = valid("cpu")
    with pytest.raises(TypeError, match=re.escape("gemm: a must be a torch.Tensor, got list")):
        gemm.gemm([[1.0]], args["b"], args["a_scale"], args["b_scale"])


@pytest.mark.parametrize("device", DEVICES)
def test_seed_tutorial_physical_layout(device):
    # The seed tutorial keeps the challenge's physical (K, M) / (K, N) tensors and indexes them
    # itself; handing those to gemm must say how to fix it.
    a, b, a_scale, b_scale = make_inputs(M, N, K, layout="mn_major", seed=1)
    a_phys, b_phys = a.T, b.T  # contiguous (K, M) and (K, N)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    to = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    with pytest.raises(RuntimeError, match=re.escape("must have the same K")) as info:
        gemm.gemm(*to(a_phys, b_phys, a_scale, b_scale), out=out.to(device))
    assert "pass a.T and b.T" in str(info.value)
    with pytest.raises(RuntimeError, match=re.escape("pass a.T")) as info:
        gemm.gemm(*to(a_phys, b, a_scale, b_scale), out=out.to(device))
    assert "(K, M)" in str(info.value)
    with pytest.raises(RuntimeError, match=re.escape("pass b.T")):
        gemm.gemm(*to(a, b_phys, a_scale, b_scale), out=out.to(device))
    if device == "cpu":  # and the suggested fix works
        assert_close_challenge(gemm.gemm(a_phys.T, b_phys.T, a_scale, b_scale), reference_gemm(a, b, a_scale, b_scale))


@pytest.mark.parametrize("device", DEVICES)
def test_seed_tutorial_square_case(device):
    # 64x64x128 (the first challenge test): K check passes by accident, the scale check catches it.
    a, b, a_scale, b_scale = make_inputs(64, 64, 128, layout="mn_major", seed=2)
    with pytest.raises(RuntimeError, match=re.escape("pass a.T and b.T")):
        gemm.gemm(*[t.to(device) for t in (a.T, b.T, a_scale, b_scale)])


def test_out_overlapping_an_input():
    a, b, a_scale, b_scale = make_inputs(4, 128, 256, layout="k_major", seed=3)
    out = a.view(torch.bfloat16)  # (4, 128) bf16 over a's bytes
    with pytest.raises(RuntimeError, match=re.escape("gemm: out must not share memory with a")):
        gemm.gemm(a, b, a_scale, b_scale, out=out)


def test_out_with_internal_overlap():
    a, b, a_scale, b_scale = make_inputs(4, 128, 256, seed=3)
    out = torch.empty(1, 128, dtype=torch.bfloat16).expand(4, 128)
    with pytest.raises(RuntimeError, match=re.escape("gemm: out must not have internal overlap")):
        gemm.gemm(a, b, a_scale, b_scale, out=out)
