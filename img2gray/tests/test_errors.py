"""Every bad input is a Python exception that names the argument, what was expected and what was received."""

import pytest
import torch

import img2gray


def image(shape=(4, 5, 3), dtype=torch.uint8, device="cpu"):
    return torch.zeros(shape, dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int32, torch.uint16])
def test_wrong_dtype(dtype):
    with pytest.raises(RuntimeError, match=rf"image must be torch.uint8, got {dtype}"):
        img2gray.img2gray(image(dtype=dtype))


def test_rgba_gets_a_hint():
    with pytest.raises(RuntimeError, match=r"3 channels.*got 4.*RGBA.*image\[\.\.\., :3\]"):
        img2gray.img2gray(image((4, 5, 4)))


@pytest.mark.parametrize("channels", [1, 2, 5])
def test_wrong_channel_count(channels):
    with pytest.raises(RuntimeError, match=rf"3 channels \(RGB\) in its last dimension, got {channels}"):
        img2gray.img2gray(image((4, 5, channels)))


@pytest.mark.parametrize("shape", [(3,), (5, 3)])
def test_too_few_dims(shape):
    with pytest.raises(ValueError, match=rf"image must have shape \(\.\.\., H, W, 3\), got {len(shape)}-D"):
        img2gray.img2gray(image(shape))
    # The op itself (no Python wrapper) says the same.
    with pytest.raises(RuntimeError, match=rf"got {len(shape)}-D"):
        img2gray.ops.img2gray(torch.empty(shape[:-1], dtype=torch.uint8), image(shape))


def test_not_a_tensor():
    with pytest.raises(TypeError, match="image must be a torch.Tensor, got ndarray"):
        import numpy as np

        img2gray.img2gray(np.zeros((2, 2, 3), np.uint8))


def test_out_wrong_shape():
    with pytest.raises(RuntimeError, match=r"out must have shape \[4, 5\], got \[5, 4\]"):
        img2gray.img2gray(image(), out=torch.empty((5, 4), dtype=torch.uint8))


def test_out_wrong_dtype():
    with pytest.raises(RuntimeError, match="out must be torch.uint8, got torch.float32"):
        img2gray.img2gray(image(), out=torch.empty((4, 5), dtype=torch.float32))


def test_out_not_contiguous():
    out = torch.empty((5, 4), dtype=torch.uint8).t()
    with pytest.raises(RuntimeError, match="out must be contiguous"):
        img2gray.img2gray(image(), out=out)


def test_out_aliasing_image():
    buf = torch.zeros((4, 5, 3), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="must not share memory"):
        img2gray.img2gray(buf, out=buf.view(-1)[:20].view(4, 5))


def test_out_on_other_device_meta():
    # No GPU needed: a meta `out` with a CPU image is a device mix too.
    with pytest.raises(RuntimeError, match=r"(same device|device)"):
        img2gray.img2gray(image(), out=torch.empty((4, 5), dtype=torch.uint8, device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")
def test_cpu_cuda_mix():
    with pytest.raises(RuntimeError, match=r"out and image must be on the same device, got out on cuda:0 and image on cpu"):
        img2gray.img2gray(image(), out=torch.empty((4, 5), dtype=torch.uint8, device="cuda"))
    with pytest.raises(RuntimeError, match=r"out and image must be on the same device, got out on cpu and image on cuda:0"):
        img2gray.img2gray(image(device="cuda"), out=torch.empty((4, 5), dtype=torch.uint8))
