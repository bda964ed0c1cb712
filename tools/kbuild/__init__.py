"""kbuild: the monorepo's shared build logic for kernel-builder kernel directories.

kernel-builder (``nix build ./<kernel>``) generates CMake, ``registration.h`` and ``_ops.py`` inside its
sandbox and never sees this package. kbuild gives the same result for local development without Nix:

* ``pip install --no-build-isolation -e <kernel>`` (each kernel's ``setup.py`` calls :func:`setup_kernel`),
* ``python tools/kbuild variant <kernel>`` (or ``PYTHONPATH=tools python -m kbuild …``) writes
  ``<kernel>/build/<variant>/`` in kernel-builder's flat layout (:mod:`kbuild.variant`), ABI-checked
  (:mod:`kbuild.abi`), with the card rendered (:mod:`kbuild.card`); ``upload`` (:mod:`kbuild.upload`) and
  ``wheel`` (:mod:`kbuild.wheel`) publish it. See ``python tools/kbuild --help``.

Everything is driven by the kernel's own ``build.toml``: the same file kernel-builder reads.
"""

from .config import KernelConfig, KernelSection, load_config
from .backend import detect_backend

__all__ = ["KernelConfig", "KernelSection", "load_config", "detect_backend", "setup_kernel"]


def setup_kernel(kernel_dir, **kwargs):
    # Imported lazily: setuptools and torch.utils.cpp_extension are slow to import and only needed to build.
    from .extension import setup_kernel as _setup_kernel

    return _setup_kernel(kernel_dir, **kwargs)
