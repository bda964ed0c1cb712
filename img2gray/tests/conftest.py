import sys
from pathlib import Path

# `python -m pytest img2gray/tests` from the repository root puts the root on sys.path, where the kernel
# *directory* would shadow the installed package as a namespace package. Drop that entry.
_REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT]

import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_generate_tests(metafunc):
    # Every test taking `device` runs on the CPU and, where one exists, on the GPU.
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


@pytest.fixture
def requires_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA/ROCm device")
