import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import img2gray
from img2gray_reference import gray_reference, random_image

SHAPES = [
    (1, 1, 3),
    (1, 17, 3),
    (1, 4096, 3),
    (7, 13, 3),  # odd width: no row is 16-byte aligned
    (33, 31, 3),
    (4097, 3, 3),
    (5, 48, 3),  # aligned rows
    (3, 50, 3),  # aligned start, 2-pixel tail
    (2160, 3840, 3),
    (2, 3, 64, 33, 3),  # batched, odd width
    (4, 19, 32, 3),  # batched, aligned
]


def assert_matches_reference(gray, image):
    ref = gray_reference(image)
    got = gray.cpu().numpy()
    assert got.shape == ref.shape
    mismatch = np.flatnonzero(got != ref)
    assert mismatch.size == 0, f"{mismatch.size} pixels differ, first at flat index {mismatch[:5]}"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_numpy_bit_exact(shape, device):
    image = random_image(shape, device)
    assert_matches_reference(img2gray.img2gray(image), image)


def test_every_rgb_triplet_extremes(device):
    # Corner values where rounding order matters most: all 0/255 combinations and near-threshold sums.
    values = torch.tensor([0, 1, 2, 127, 128, 254, 255], dtype=torch.uint8)
    grid = torch.cartesian_prod(values, values, values).reshape(1, -1, 3).to(device)
    assert_matches_reference(img2gray.img2gray(grid), grid)


def test_all_16m_colours(device):
    # Exhaustive: every RGB triplet once (256^3 pixels, 48 MiB).
    r = torch.arange(256, dtype=torch.uint8)
    image = torch.cartesian_prod(r, r, r).reshape(4096, 4096, 3).to(device)
    assert_matches_reference(img2gray.img2gray(image), image)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    h=st.integers(1, 70),
    w=st.integers(1, 150),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_shapes_property(batch, h, w, seed):
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        image = random_image((*batch, h, w, 3), device, seed)
        assert_matches_reference(img2gray.img2gray(image), image)


@pytest.mark.parametrize("shape", [(9, 35, 3), (64, 64, 3), (3, 16, 40, 3)], ids=str)
def test_poisoned_out_is_fully_written(shape, device):
    image = random_image(shape, device)
    out = torch.full(shape[:-1], 0xAB, dtype=torch.uint8, device=device)
    returned = img2gray.img2gray(image, out=out)
    assert returned.data_ptr() == out.data_ptr()
    assert_matches_reference(out, image)


def test_non_contiguous_inputs(device):
    chw = random_image((3, 45, 67), device)
    hwc_view = chw.permute(1, 2, 0)  # channels-first storage seen as HWC
    assert not hwc_view.is_contiguous()
    assert_matches_reference(img2gray.img2gray(hwc_view), hwc_view)

    big = random_image((50, 90, 3), device)
    crop = big[5:40:2, 3:77]  # strided rows, offset start
    assert_matches_reference(img2gray.img2gray(crop), crop)

    rgba = random_image((20, 30, 4), device)
    rgb_of_rgba = rgba[..., :3]  # the RGBA hint's suggestion works
    assert_matches_reference(img2gray.img2gray(rgb_of_rgba), rgb_of_rgba)


def test_unaligned_storage_offset(device):
    # Data pointer off 16-byte alignment: the vector path must not be taken.
    flat = random_image((1 + 16 * 32 * 3,), device)
    image = flat[1:].view(16, 32, 3)
    assert_matches_reference(img2gray.img2gray(image), image)


@pytest.mark.parametrize("shape", [(0, 5, 3), (5, 0, 3), (2, 0, 0, 3), (0, 4, 4, 3)], ids=str)
def test_empty_images(shape, device):
    out = img2gray.img2gray(torch.empty(shape, dtype=torch.uint8, device=device))
    assert out.shape == shape[:-1] and out.dtype == torch.uint8


def test_uses_current_stream(requires_cuda):
    image = random_image((512, 512, 3), "cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = img2gray.img2gray(image)
    stream.synchronize()
    assert_matches_reference(out, image)


def test_opcheck(device):
    image = random_image((11, 23, 3), device)
    out = torch.empty((11, 23), dtype=torch.uint8, device=device)
    torch.library.opcheck(img2gray.ops.img2gray, (out, image))


def test_torch_compile_fullgraph(device):
    def f(x):
        return img2gray.img2gray(x[..., :3])

    compiled = torch.compile(f, fullgraph=True)
    image = random_image((2, 24, 40, 4), device)
    torch.testing.assert_close(compiled(image), f(image), rtol=0, atol=0)


def thread_cpu_ticks():
    """CPU time (user + system, in clock ticks) that each OS thread of this process has used so far."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread has ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 of proc(5) onwards
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return ticks


def busy_threads(call, min_ticks=2, attempts=3):
    """How many threads each used at least ``min_ticks`` of CPU time while ``call`` ran (the most seen in
    ``attempts`` runs: on a loaded machine a helper thread may start late and find the work done)."""
    most = 0
    for _ in range(attempts):
        before = thread_cpu_ticks()
        call()
        after = thread_cpu_ticks()
        most = max(most, sum(after[t] - before.get(t, 0) >= min_ticks for t in after))
    return most


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_cpu_work_runs_on_the_requested_number_of_threads():
    # 16 Mi pixels, a few times: with torch.set_num_threads(2) two OS threads must accumulate CPU time,
    # with 1 only the calling thread. No timing threshold.
    image = random_image((4096, 4096, 3), seed=1)
    out = torch.empty((4096, 4096), dtype=torch.uint8)

    def call():
        for _ in range(4):
            img2gray.img2gray(image, out=out)

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        call()  # starts torch's inter-op pool
        assert busy_threads(call) >= 2
        torch.set_num_threads(1)
        assert busy_threads(call, attempts=1) == 1
    finally:
        torch.set_num_threads(threads)
    assert_matches_reference(out, image)
