"""Smoke tests kernels-community's CI runs against a built variant: ``pytest tests -m kernels_ci``.

Fast (well under a minute on a CPU), and they import only torch, numpy, pytest and the kernel. There the
variant is loaded through ``LOCAL_KERNELS`` (see conftest.py); with an editable install they test that.
Each runs on the device the loaded build serves (a variant holds one backend) against the exact formula
evaluated by NumPy on fresh random images.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import img2gray

pytestmark = pytest.mark.kernels_ci


def _device() -> str:
    meta = Path(img2gray.__file__).parent / "metadata.json"
    if meta.is_file():  # a build variant: one backend
        return "cpu" if json.loads(meta.read_text())["backend"]["type"] == "cpu" else "cuda"
    return "cuda" if torch.cuda.is_available() else "cpu"


DEVICE = _device()


def _gray(image: np.ndarray) -> np.ndarray:
    """trunc(0.21 R + 0.72 G + 0.07 B) in float32, each product and sum rounded on its own."""
    rgb = image.astype(np.float32)
    total = (np.float32(0.21) * rgb[..., 0] + np.float32(0.72) * rgb[..., 1]) + np.float32(0.07) * rgb[..., 2]
    return total.astype(np.uint8)


@pytest.fixture
def rng():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")
    return np.random.default_rng(seed)


@pytest.mark.parametrize("shape", [(1, 1, 3), (37, 53, 3), (2, 5, 31, 3), (64, 130, 3)])
def test_matches_numpy(shape, rng):
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    gray = img2gray.img2gray(torch.from_numpy(image).to(DEVICE))
    assert gray.dtype == torch.uint8 and tuple(gray.shape) == shape[:-1] and gray.device.type == DEVICE
    np.testing.assert_array_equal(gray.cpu().numpy(), _gray(image))


def test_out_is_written_in_full(rng):
    image = rng.integers(0, 256, size=(19, 45, 3), dtype=np.uint8)
    out = torch.full((19, 45), 0xA5, dtype=torch.uint8, device=DEVICE)  # poisoned: every byte must be written
    assert img2gray.img2gray(torch.from_numpy(image).to(DEVICE), out=out) is out
    np.testing.assert_array_equal(out.cpu().numpy(), _gray(image))


def test_channels_first_view(rng):
    chw = rng.integers(0, 256, size=(3, 23, 41), dtype=np.uint8)
    view = torch.from_numpy(chw).to(DEVICE).movedim(-3, -1)  # (H, W, 3), not contiguous
    np.testing.assert_array_equal(img2gray.img2gray(view).cpu().numpy(), _gray(np.moveaxis(chw, 0, -1)))


def test_bad_dtype_names_the_argument():
    with pytest.raises(RuntimeError, match=r"image must be torch.uint8, got torch.float32"):
        img2gray.img2gray(torch.zeros((4, 5, 3), dtype=torch.float32, device=DEVICE))


def test_meta_tensors_give_the_output_shape():
    out = img2gray.img2gray(torch.empty((2, 7, 9, 3), dtype=torch.uint8, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (2, 7, 9) and out.dtype == torch.uint8
