"""The tutorial's formula in NumPy: the independent reference every backend must match bit for bit."""

import numpy as np
import torch

R, G, B = np.float32(0.21), np.float32(0.72), np.float32(0.07)


def gray_reference(image: torch.Tensor) -> np.ndarray:
    rgb = image.cpu().numpy().astype(np.float32)
    # float32 products and sums, each rounded, in this order; astype truncates toward zero.
    return ((R * rgb[..., 0] + G * rgb[..., 1]) + B * rgb[..., 2]).astype(np.uint8)


def random_image(shape, device="cpu", seed=None) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).to(device)
