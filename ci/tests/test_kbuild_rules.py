"""The pip path builds what kernel-builder's Nix build would: tiny fixture kernels, generated here in temp dirs.

A passing kernel is built into a variant (``tools/kbuild variant``) and loaded with ``kernels.get_local_kernel``:
its sources assert, at compile time, kernel-builder's include roots (csrc/ + the section's include list +
the includer's folder; neither the kernel dir nor the staged root), its defines and its C++ standard. Broken
copies of it must fail before compiling, with a message naming the file and the build.toml section: a header
used but not listed, a listed file that does not exist, an include that resolves only from the repository
root or only from the kernel dir, an include found only through another section's include list (the binding's,
or a kernel source's through another kernel section's): kernel-builder gives each source the include roots of
its own section only.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
KBUILD = ROOT / "tools" / "kbuild"
sys.path.insert(0, str(ROOT / "tools"))

EXPECTED_CPLUSPLUS = "202002L" if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 12) else "201703L"

BUILD_TOML = """\
[general]
name = "toy"
version = 1
edition = 5
license = "Apache-2.0"
backends = ["cpu"]

[general.hub]
repo-id = "kernels-test/toy"

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.toy_cpu]
backend = "cpu"
depends = ["torch"]
include = ["include"]
cxx-flags = ["-DTOY_EXPECT_CPLUSPLUS={cplusplus}"]
src = [
  "csrc/toy_cpu/toy.cpp",
  "csrc/toy_cpu/toy.h",
  "csrc/toy_cpu/scale.h",
  "include/toy_common.h",
]
"""

# A second CPU section with its own include root (the source set and include check see both sections).
TOY_EXTRA_SECTION = """
[kernel.toy_extra]
backend = "cpu"
depends = ["torch"]
include = ["extra_inc"]
src = [
  "csrc/toy_extra/extra.cpp",
  "extra_inc/toy_extra.h",
]
"""

FILES = {
    "torch-ext/torch_binding.cpp": """\
        #include <torch/library.h>

        #include "registration.h"   // generated into torch-ext/, the includer's folder
        #include "toy_cpu/toy.h"    // csrc/ is an include root
        // not roots: the kernel dir (staged root), and files build.toml does not list
        #if __has_include("csrc/toy_cpu/toy.h") || __has_include("toy_cpu/unlisted.h")
        #error "the staged root is an include root, or an unlisted file was copied"
        #endif
        // nor [kernel.toy_cpu]'s include list: each source gets its own section's roots
        #if __has_include("toy_common.h")
        #error "another section's include root reached the binding"
        #endif
        #if !defined(CPU_KERNEL) || defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
        #error "a CPU build defines CPU_KERNEL only"
        #endif

        int64_t value() { return toy_value(); }

        TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
          ops.def("value() -> int");
          ops.impl("value", &value);
        }

        REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
        """,
    "csrc/toy_cpu/toy.h": """\
        #pragma once
        #include <cstdint>
        int64_t toy_value();
        """,
    "csrc/toy_cpu/toy.cpp": """\
        #include "toy.h"          // the includer's own folder
        #include "scale.h"
        #include "toy_common.h"   // [kernel.toy_cpu] include = ["include"]
        static_assert(__cplusplus == TOY_EXPECT_CPLUSPLUS, "kernel-builder's C++ standard for this torch");
        #if !defined(CPU_KERNEL) || !defined(TORCH_EXTENSION_NAME)
        #error "kernel-builder defines CPU_KERNEL and TORCH_EXTENSION_NAME for every source"
        #endif
        int64_t toy_value() { return kToyBase * kScale; }
        """,
    "csrc/toy_cpu/scale.h": "#pragma once\n#include <cstdint>\nconstexpr int64_t kScale = 7;\n",
    "csrc/toy_cpu/unlisted.h": "#pragma once\n",
    "include/toy_common.h": "#pragma once\n#include <cstdint>\nconstexpr int64_t kToyBase = 6;\n",
    "torch-ext/toy/__init__.py": """\
        from ._ops import ops

        __all__ = ["value"]


        def value():
            return ops.value()
        """,
    "tests/test_toy.py": "def test_nothing():\n    pass\n",
    "README.md": "not part of the Nix source set\n",
}


def make_kernel(parent: Path, edits=None) -> Path:
    """The fixture kernel at ``parent/toy``; ``edits`` maps paths to new contents (None deletes)."""
    kdir = parent / "toy"
    files = {"build.toml": BUILD_TOML.format(cplusplus=EXPECTED_CPLUSPLUS),
             **{k: textwrap.dedent(v) for k, v in FILES.items()}}
    for path, text in (edits or {}).items():
        if text is None:
            files.pop(path)
        else:
            files[path] = text
    for path, text in files.items():
        (kdir / path).parent.mkdir(parents=True, exist_ok=True)
        (kdir / path).write_text(text)
    return kdir


def kbuild(*args, timeout=900):
    env = dict(os.environ, KBUILD_BACKEND="cpu", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, str(KBUILD), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_fixture_kernel_builds_under_kernel_builder_rules_and_loads(tmp_path):
    kdir = make_kernel(tmp_path)
    result = kbuild("variant", kdir, "--out", tmp_path / "out", "--skip-abi-check")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    variants = list((tmp_path / "out").iterdir())
    assert len(variants) == 1 and json.loads((variants[0] / "metadata.json").read_text())["name"] == "toy"

    stage = kdir / "_build" / "stage"
    staged = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    assert staged == sorted(["build.toml", "csrc/toy_cpu/scale.h", "csrc/toy_cpu/toy.cpp", "csrc/toy_cpu/toy.h",
                             "include/toy_common.h", "pyproject.toml", "tests/test_toy.py", "torch-ext/registration.h",
                             "torch-ext/toy/__init__.py", "torch-ext/torch_binding.cpp"])

    check = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from kernels import get_local_kernel
        toy = get_local_kernel(Path({str(tmp_path / 'out')!r}))
        assert toy.value() == 42, toy.value()
        print("OK")
    """)], capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.strip() == "OK", check.stdout + check.stderr


BROKEN = {
    "header used but not listed": (
        {"build.toml": BUILD_TOML.format(cplusplus=EXPECTED_CPLUSPLUS).replace('  "csrc/toy_cpu/scale.h",\n', "")},
        ["[kernel.toy_cpu]", "csrc/toy_cpu/toy.cpp", '#include "scale.h"', "csrc/toy_cpu/scale.h",
         "build.toml does not list"]),
    "listed file does not exist": (
        {"build.toml": BUILD_TOML.format(cplusplus=EXPECTED_CPLUSPLUS).replace(
            '"csrc/toy_cpu/scale.h",', '"csrc/toy_cpu/scale.h",\n  "csrc/toy_cpu/gone.cpp",')},
        ["[kernel.toy_cpu]", "csrc/toy_cpu/gone.cpp", "does not exist"]),
    "include that resolves only from the repository root": (
        {"torch-ext/torch_binding.cpp": '#include "shared/toy_shared.h"\n' + textwrap.dedent(
            FILES["torch-ext/torch_binding.cpp"])},
        ["[torch]", "torch-ext/torch_binding.cpp", '#include "shared/toy_shared.h"', "repository root"]),
    "include that resolves only from the kernel dir": (
        {"torch-ext/torch_binding.cpp": textwrap.dedent(FILES["torch-ext/torch_binding.cpp"]).replace(
            '#include "toy_cpu/toy.h"', '#include "csrc/toy_cpu/toy.h"')},
        ["[torch]", "torch-ext/torch_binding.cpp", '#include "csrc/toy_cpu/toy.h"', "not an include root"]),
    "include found only through another section's include list": (
        {"torch-ext/torch_binding.cpp": '#include "toy_common.h"\n' + textwrap.dedent(
            FILES["torch-ext/torch_binding.cpp"])},
        ["[torch]", '#include "toy_common.h"', "[kernel.toy_cpu]", "include/toy_common.h"]),
    "kernel source whose header only another kernel section's include list reaches": (
        {"build.toml": BUILD_TOML.format(cplusplus=EXPECTED_CPLUSPLUS) + TOY_EXTRA_SECTION,
         "extra_inc/toy_extra.h": "#pragma once\nconstexpr int kExtra = 1;\n",
         "csrc/toy_extra/extra.cpp": '#include "toy_extra.h"\nint toy_extra() { return kExtra; }\n',
         "csrc/toy_cpu/toy.cpp": '#include "toy_extra.h"\n' + textwrap.dedent(FILES["csrc/toy_cpu/toy.cpp"])},
        ["[kernel.toy_cpu]", "csrc/toy_cpu/toy.cpp", '#include "toy_extra.h"', "[kernel.toy_extra]",
         "extra_inc/toy_extra.h", "include list of [kernel.toy_cpu]"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_fixture_fails_naming_file_and_section(tmp_path, case):
    edits, expected = BROKEN[case]
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "toy_shared.h").write_text("#pragma once\n")  # beside the kernel, as ../shared would be
    kdir = make_kernel(tmp_path, edits)
    result = kbuild("variant", kdir, "--out", tmp_path / "out", "--skip-abi-check", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    for text in expected:
        assert text in result.stderr, f"{text!r} not in:\n{result.stderr}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "no variant may be written"
    assert "building toy variant" not in result.stdout, "the build must stop before compiling"


def test_editable_install_fails_the_same_way(tmp_path):
    """`pip install -e` runs the same staging and include check (setup.py -> kbuild.setup_kernel)."""
    edits, expected = BROKEN["header used but not listed"]
    kdir = make_kernel(tmp_path, edits)
    (kdir / "setup.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tools')!r})\n"
                                   "from kbuild import setup_kernel\nsetup_kernel(__import__('pathlib').Path(__file__).parent)\n")
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                             "--no-index", "--dry-run", "-e", str(kdir)], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, KBUILD_BACKEND="cpu"))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    for text in expected:
        assert text in output, f"{text!r} not in:\n{output[-3000:]}"


def test_cxx_standard_follows_torch_version():
    from kbuild.rules import cxx_standard

    assert [cxx_standard(v) for v in ("2.9.1", "2.11.0+cu130", "2.12.0", "2.13.0+cpu", "2.14.0a0")] == \
        ["c++17", "c++17", "c++20", "c++20", "c++20"]


def test_nix_file_set_of_the_real_kernels():
    from kbuild.config import load_config
    from kbuild.stage import file_set

    for kernel in ("img2gray", "gemm"):
        cfg = load_config(ROOT / kernel)
        files = file_set(cfg)
        listed = {"build.toml", *cfg.torch_src, *(s for k in cfg.kernels for s in k.src)}
        assert listed <= set(files)
        extra = set(files) - listed
        assert all(f.startswith(("torch-ext/", "tests/")) and f.endswith((".py", ".pyi")) for f in extra), extra
        assert f"torch-ext/{cfg.python_name}/__init__.py" in files
        assert not any(f.endswith(("README.md", "CARD.md", "flake.nix", "setup.py", "pytest.ini")) for f in files)
