"""Argument checks of the img2gray op: the one validation of the Python API and of the fake (meta) implementation.

``img2gray()`` runs :func:`check_arguments` before it calls the op and the fake implementation runs it on
meta/fake tensors, so eager calls, meta tensors and torch.compile tracing report the same errors.
torch_binding.cpp repeats every check, in the same order and with the same messages, for callers of the
raw op (``ops.img2gray``); the tests hold the two to the same list of bad inputs.

Conventions: ``TypeError`` when an argument is not a tensor (``None`` included); ``RuntimeError`` for a
tensor with the wrong dtype, shape, device, strides or memory overlap (as torch's own ops). A uint8 out
cannot require grad, so there is no gradient check.
"""
import torch
from torch._subclasses.fake_tensor import FakeTensor


def _shape(sizes):
    return "[" + ", ".join(str(int(s)) for s in sizes) + "]"


def check_tensor(t, name):
    if not isinstance(t, torch.Tensor):
        got = "None" if t is None else type(t).__name__
        raise TypeError(f"img2gray: {name} must be a torch.Tensor, got {got}")


def check_image(image):
    """The checks that need only the image (the wrapper runs them before it allocates out)."""
    check_tensor(image, "image")
    if image.dtype != torch.uint8:
        raise RuntimeError(f"img2gray: image must be torch.uint8, got {image.dtype}")
    if image.dim() < 3:
        raise RuntimeError(f"img2gray: image must have shape (..., H, W, 3), got {image.dim()}-D shape {_shape(image.shape)}")
    channels = image.shape[-1]
    if channels != 3:
        hint = ""
        if image.shape[-3] == 3:
            hint = "; a channels-first (..., 3, H, W) image goes in as image.movedim(-3, -1), a view packed once"
        elif channels == 4:
            hint = "; for RGBA drop the alpha channel first: image[..., :3]"
        raise RuntimeError(
            f"img2gray: image must have 3 channels (RGB) in its last dimension, got {channels} "
            f"(shape {_shape(image.shape)}){hint}"
        )


def _byte_range(t):
    """(storage key, first byte, one past the last byte) of the memory ``t``'s elements span, or None when
    it cannot be known here. Real tensors are compared by address, meta and fake tensors (no memory) by
    storage identity and offset."""
    if t.numel() == 0:
        return None
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    item = t.element_size()
    try:
        storage = t.untyped_storage()
        if t.is_meta or isinstance(t, FakeTensor):
            key, begin = storage._cdata, t.storage_offset() * item
        else:
            key, begin = None, t.data_ptr()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage: the op itself checks
        return None
    return key, begin, begin + (last + 1) * item


def check_arguments(out, image):
    """Raise TypeError/RuntimeError naming the argument, the expected and the received value."""
    check_tensor(image, "image")
    check_tensor(out, "out")
    check_image(image)
    if out.dtype != torch.uint8:
        raise RuntimeError(f"img2gray: out must be torch.uint8, got {out.dtype}")
    expected = tuple(image.shape[:-1])
    if tuple(out.shape) != expected:
        raise RuntimeError(f"img2gray: out must have shape {_shape(expected)}, got {_shape(out.shape)}")
    if out.device != image.device:
        raise RuntimeError(
            f"img2gray: out and image must be on the same device, got out on {out.device} and image on {image.device}"
        )
    if not out.is_contiguous():
        raise RuntimeError(
            f"img2gray: out must be contiguous, got strides {_shape(out.stride())} for shape {_shape(out.shape)}"
        )
    # Sharing a buffer is fine; sharing bytes is not (ranges that merely interleave count as shared).
    o, i = _byte_range(out), _byte_range(image)
    if o is not None and i is not None and o[0] == i[0] and o[1] < i[2] and i[1] < o[2]:
        raise RuntimeError("img2gray: out must not overlap image in memory (the bytes they span intersect)")
