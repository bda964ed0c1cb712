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
