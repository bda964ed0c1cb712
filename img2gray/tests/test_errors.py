"""Every bad input is a Python exception that names the argument, what was expected and what was received.

One list of bad inputs (BAD_INPUTS), each run through every path that can see it:

    api        img2gray.img2gray(image, out=...) on CPU   the Python validator (_validate.py), then the op
    raw        img2gray.ops.img2gray(out, image) on CPU   the C++ checks of torch_binding.cpp alone
    api-meta / raw-meta                                  the same on meta tensors (the fake implementation)
    api-cuda / raw-cuda                                  on a GPU (skipped without one)

and each must raise the same exception type with the same message. Convention (README, "Errors"):
TypeError when an argument is not a tensor (None included), RuntimeError for a tensor with the wrong
dtype, shape, device, strides or memory overlap.
"""
import re

import numpy as np
import pytest
import torch

import img2gray
from img2gray_reference import gray_reference, random_image

PATHS = ["api", "raw", "api-meta", "raw-meta"] + [
    pytest.param(p, marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device"))
    for p in ("api-cuda", "raw-cuda")]


def _device(path):
    return {"api": "cpu", "raw": "cpu", "api-meta": "meta", "raw-meta": "meta"}.get(path, "cuda")


def call(path, image, out):
    if path.startswith("raw"):
        return img2gray.ops.img2gray(out, image)
    return img2gray.img2gray(image, out=out)


def _other_device(device):
    return "meta" if device.type != "meta" else "cpu"


def _args(image_shape=(4, 5, 3), image_dtype=torch.uint8, out_shape=(4, 5), out_dtype=torch.uint8):
    """make(device) -> (image, out), zero-filled."""
    return lambda dev: (torch.zeros(image_shape, dtype=image_dtype, device=dev),
                        torch.zeros(out_shape, dtype=out_dtype, device=dev))


def _with_out(make_out):
    return lambda dev: (torch.zeros((4, 5, 3), dtype=torch.uint8, device=dev), make_out(dev))


def _out_overlapping_image(dev):
    buf = torch.zeros(100, dtype=torch.uint8, device=dev)
    return buf[:60].view(4, 5, 3), buf[50:70].view(4, 5)  # bytes 50..59 are in both


def _out_aliasing_image(dev):
    image = torch.zeros((4, 5, 3), dtype=torch.uint8, device=dev)
    return image, image.view(-1)[:20].view(4, 5)


# (id, make(device) -> (image, out), exception, message or message(image device), paths that can express it)
BAD_INPUTS = [
    *[(f"image-{str(dtype)[6:]}", _args(image_dtype=dtype), RuntimeError,
       f"img2gray: image must be torch.uint8, got {dtype}")
      for dtype in (torch.float32, torch.int8, torch.int32, torch.uint16)],
    ("image-rgba", _args((4, 5, 4)), RuntimeError,
     "img2gray: image must have 3 channels (RGB) in its last dimension, got 4 (shape [4, 5, 4]); for RGBA drop "
     "the alpha channel first: image[..., :3]"),
    ("image-chw", _args((3, 4, 5), out_shape=(3, 4)), RuntimeError,
     "img2gray: image must have 3 channels (RGB) in its last dimension, got 5 (shape [3, 4, 5]); a channels-first "
     "(..., 3, H, W) image goes in as image.movedim(-3, -1), a view packed once"),
    ("image-batched-chw", _args((2, 3, 4, 4), out_shape=(2, 3, 4)), RuntimeError,
     "img2gray: image must have 3 channels (RGB) in its last dimension, got 4 (shape [2, 3, 4, 4]); a channels-first "
     "(..., 3, H, W) image goes in as image.movedim(-3, -1)"),
    *[(f"image-{c}-channels", _args((4, 5, c)), RuntimeError,
       f"img2gray: image must have 3 channels (RGB) in its last dimension, got {c} (shape [4, 5, {c}])")
      for c in (1, 2, 5)],
    ("image-1d", _args((3,), out_shape=()), RuntimeError,
     "img2gray: image must have shape (..., H, W, 3), got 1-D shape [3]"),
    ("image-2d", _args((5, 3), out_shape=(5,)), RuntimeError,
     "img2gray: image must have shape (..., H, W, 3), got 2-D shape [5, 3]"),
    ("out-shape", _args(out_shape=(5, 4)), RuntimeError, "img2gray: out must have shape [4, 5], got [5, 4]"),
    # A float out is refused for its dtype (uint8 tensors cannot require grad, so no gradient check is needed).
    ("out-float32", _args(out_dtype=torch.float32), RuntimeError, "img2gray: out must be torch.uint8, got torch.float32"),
    ("out-transposed", _with_out(lambda dev: torch.zeros((5, 4), dtype=torch.uint8, device=dev).t()),
     RuntimeError, "img2gray: out must be contiguous, got strides [1, 4] for shape [4, 5]"),
    ("out-expanded", _with_out(lambda dev: torch.zeros((1, 5), dtype=torch.uint8, device=dev).expand(4, 5)),
     RuntimeError, "img2gray: out must be contiguous, got strides [0, 1] for shape [4, 5]"),
    ("out-other-device",
     _with_out(lambda dev: torch.zeros((4, 5), dtype=torch.uint8, device=_other_device(torch.device(dev)))),
     RuntimeError, lambda dev: f"img2gray: out and image must be on the same device, got out on "
                               f"{_other_device(dev)} and image on {dev}"),
    ("out-overlaps-image", _out_overlapping_image, RuntimeError,
     "img2gray: out must not overlap image in memory (the bytes they span intersect)"),
    ("out-aliases-image", _out_aliasing_image, RuntimeError,
     "img2gray: out must not overlap image in memory (the bytes they span intersect)"),
    ("image-None", lambda dev: (None, torch.zeros((4, 5), dtype=torch.uint8, device=dev)), TypeError,
     "img2gray: image must be a torch.Tensor, got None"),
    ("out-None", lambda dev: (torch.zeros((4, 5, 3), dtype=torch.uint8, device=dev), None), TypeError,
     "img2gray: out must be a torch.Tensor, got None", ("raw",)),
    ("image-ndarray", lambda dev: (np.zeros((2, 2, 3), np.uint8), torch.zeros((2, 2), dtype=torch.uint8)),
     TypeError, "img2gray: image must be a torch.Tensor, got ndarray", ("api",)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input(case, path):
    _, make, exc, message, *only = case
    if only and path.split("-")[0] not in only[0]:
        pytest.skip(f"not expressible through the {path} path")
    image, out = make(_device(path))
    if callable(message):
        message = message(image.device)
    with pytest.raises(exc, match=re.escape(message)):
        call(path, image, out)


@pytest.mark.parametrize("path", ["api", "api-meta"])
def test_without_out_the_wrapper_fails_before_allocating(path):
    with pytest.raises(RuntimeError, match=re.escape("img2gray: image must have shape (..., H, W, 3), got 2-D")):
        img2gray.img2gray(torch.zeros((5, 3), dtype=torch.uint8, device=_device(path)))
    with pytest.raises(TypeError, match=re.escape("img2gray: image must be a torch.Tensor, got None")):
        img2gray.img2gray(None)


@pytest.mark.parametrize("path", ["api", "raw"])
def test_out_sharing_a_buffer_without_overlap_is_accepted(path):
    # One allocation holding the image and out side by side: disjoint bytes, nothing to refuse.
    buf = torch.zeros(4 * 5 * 3 + 4 * 5, dtype=torch.uint8)
    image = buf[:60].view(4, 5, 3)
    image.copy_(random_image((4, 5, 3), seed=3))
    out = buf[60:].view(4, 5)
    call(path, image, out)
    assert np.array_equal(out.numpy(), gray_reference(image))


def test_rgba_hint_under_torch_compile():
    # Tracing runs the fake implementation, which must refuse with the eager message.
    compiled = torch.compile(img2gray.img2gray, fullgraph=True)
    with pytest.raises(RuntimeError, match=re.escape("for RGBA drop the alpha channel first: image[..., :3]")):
        compiled(torch.zeros((4, 5, 4), dtype=torch.uint8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")
def test_cpu_cuda_mix():
    image = torch.zeros((4, 5, 3), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"out and image must be on the same device, got out on cuda:0 and image on cpu"):
        img2gray.img2gray(image, out=torch.empty((4, 5), dtype=torch.uint8, device="cuda"))
    with pytest.raises(RuntimeError, match=r"out and image must be on the same device, got out on cpu and image on cuda:0"):
        img2gray.img2gray(image.cuda(), out=torch.empty((4, 5), dtype=torch.uint8))
