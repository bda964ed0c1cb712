"""img2gray on a second GPU of one process: it runs on the image's own device and that device's current stream,
whatever device is current, and allocates nothing on another device.

Skipped below two CUDA devices. With cuda:0 current and the tensors on cuda:1: bit-exact against the NumPy
reference, device 0's memory untouched, a side stream set current on cuda:1 honoured, a CUDA graph captured on
cuda:1 replayed; two threads, one per GPU, calling concurrently; tensors on two GPUs refused.
"""
import threading
import time

import numpy as np
import pytest
import torch

from img2gray_reference import gray_reference, random_image

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two CUDA devices")

if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
    import img2gray

SHAPES = [(1080, 1920, 3), (7, 13, 3), (2, 33, 31, 3)]  # aligned rows, odd width, batched


def _assert_exact(gray, image):
    assert np.array_equal(gray.cpu().numpy(), gray_reference(image))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_runs_on_the_images_device(shape):
    torch.cuda.set_device(0)
    image = random_image(shape, "cuda:1", seed=1)
    out = torch.full(shape[:-1], 7, dtype=torch.uint8, device="cuda:1")
    torch.cuda.synchronize(1)
    before = (torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0))
    img2gray.img2gray(image, out=out)
    auto = img2gray.img2gray(image)
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0 and auto.device == torch.device("cuda:1")
    assert (torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0)) == before
    _assert_exact(out, image)
    assert torch.equal(auto, out)


def test_uses_the_current_stream_of_the_images_device():
    image = random_image((2160, 3840, 3), "cuda:1", seed=2)
    out = torch.zeros((2160, 3840), dtype=torch.uint8, device="cuda:1")
    side = torch.cuda.Stream(device=1)
    with torch.cuda.device(1):
        torch.cuda.synchronize()
        torch.cuda.set_stream(side)
    torch.cuda.set_device(0)
    try:
        with torch.cuda.device(1):
            torch.cuda._sleep(200_000_000)  # about 0.1 s on `side`, ahead of the call
        img2gray.img2gray(image, out=out)
        default = torch.cuda.default_stream(1)
        with torch.cuda.stream(default):
            snapshot = out.clone()
        default.synchronize()
        assert not snapshot.any(), "the call ran on device 1's default stream, not its current one"
        side.synchronize()
    finally:
        with torch.cuda.device(1):
            torch.cuda.set_stream(torch.cuda.default_stream(1))
        torch.cuda.set_device(0)
    _assert_exact(out, image)


def test_cuda_graph_captured_on_the_second_device():
    image = random_image((1080, 1920, 3), "cuda:1", seed=3)
    out = torch.empty((1080, 1920), dtype=torch.uint8, device="cuda:1")
    with torch.cuda.device(1):
        img2gray.img2gray(image, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            img2gray.img2gray(image, out=out)
    torch.cuda.set_device(0)
    image.copy_(random_image((1080, 1920, 3), "cuda:1", seed=4))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize(1)
    _assert_exact(out, image)


def test_two_threads_one_per_gpu():
    errors = []

    def worker(device):
        try:
            torch.cuda.set_device(device)
            image = random_image((1080, 1920, 3), f"cuda:{device}", seed=10 + device)
            ref = gray_reference(image)
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                gray = img2gray.img2gray(image)
                torch.cuda.synchronize(device)
                assert np.array_equal(gray.cpu().numpy(), ref), f"cuda:{device}: result differs from the reference"
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_tensors_on_two_gpus_are_refused():
    image = random_image((16, 16, 3), "cuda:0", seed=5)
    out = torch.empty((16, 16), dtype=torch.uint8, device="cuda:1")
    with pytest.raises(RuntimeError, match="out and image must be on the same device, got out on cuda:1 and image on cuda:0"):
        img2gray.img2gray(image, out=out)
