"""`kernels benchmark` workloads for img2gray (run: `kernels benchmark kernels-community/img2gray --version 1`,
or against a local build: `kernels benchmark ./img2gray`, which loads img2gray/build/<variant>/).

Each benchmark_* times one call of the kernel; its verify_* computes the same image with plain torch
ops (the tutorial's float32 formula, each product and sum rounded separately), which the runner
compares with self.out and times as the reference. uint8 results must match exactly (atol 1e-2 < 1).
Cross-implementation comparisons (torch.compile, torchvision, bandwidth) live in the monorepo's
top-level benchmarks/img2gray_bench.py.
"""

import torch

from kernels.benchmark import Benchmark


def _reference(image: torch.Tensor) -> torch.Tensor:
    rgb = image.to(torch.float32)
    gray = rgb[..., 0] * 0.21 + rgb[..., 1] * 0.72
    gray = gray + rgb[..., 2] * 0.07
    return gray.trunc().to(torch.uint8)


class Img2GrayBenchmark(Benchmark):
    seed = 0

    def _image(self, *shape: int) -> None:
        self.image = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, device=self.device)
        # Poisoned: a kernel that skips pixels cannot pass verification by luck.
        self.out = torch.full(shape, 0xA5, dtype=torch.uint8, device=self.device)

    def setup_full_hd(self):
        self._image(1080, 1920)

    def benchmark_full_hd(self):
        self.kernel.img2gray(self.image, out=self.out)

    def verify_full_hd(self) -> torch.Tensor:
        return _reference(self.image)

    def setup_uhd_4k(self):
        self._image(2160, 3840)

    def benchmark_uhd_4k(self):
        self.kernel.img2gray(self.image, out=self.out)

    def verify_uhd_4k(self) -> torch.Tensor:
        return _reference(self.image)

    def setup_batch8_odd(self):
        # Batched, odd width and height: exercises the row tails.
        self._image(8, 719, 1281)

    def benchmark_batch8_odd(self):
        self.kernel.img2gray(self.image, out=self.out)

    def verify_batch8_odd(self) -> torch.Tensor:
        return _reference(self.image)
