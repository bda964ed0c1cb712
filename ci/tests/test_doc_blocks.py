"""Every fenced code block of the READMEs and kernel cards runs or is checked, so a block that goes stale fails CI.

- ```python: run on its own in a fresh interpreter from the repository root (each block is complete: imports and
  inputs). `get_kernel("kernels-community/<name>", ...)` loads the local build variant through LOCAL_KERNELS, as
  kernels-community's CI does, and a `LayerRepository` of a kernel here becomes the `LocalLayerRepository` of its
  build (a version spec needs the Hub); the cards' `{{ repo_id }}` / `{{ version }}` are filled in from build.toml.
- ```bash: each command is checked: the files it names exist, `make` targets, `python3 tools/kbuild` and `kernels`
  subcommands exist (their --help runs), nix commands carry the flags the Nix of ci/setup.sh needs. A block
  preceded by `<!-- doc-test: run -->` is also run (cheap commands only).
- ```text: prose (formulas, messages, file trees); not code.
- `<!-- doc-test: gpu -->` before a block: it needs a CUDA GPU; skipped here with that reason, run where one is.
  (The blocks pick their device at run time, so on a GPU machine every one of them runs on the GPU:
  `bash benchmarks/run_h200.sh build img2gray test=ci/tests/test_doc_blocks.py` with KBUILD_CUDA_ARCHS=9.0.)
An unlabeled block fails: every block says what it is.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "img2gray/README.md", "gemm/README.md", "img2gray/CARD.md", "gemm/CARD.md"]
KERNELS = ["img2gray", "gemm"]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<what>[a-z]+)\s*-->\s*$")


def _blocks():
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            body = "\n".join(row[len(m.group("indent")):] for row in m.group("body").splitlines())
            yield pytest.param(doc, line, m.group("lang").strip(), body, marker.group("what") if marker else None,
                               id=f"{doc}:{line}")


BLOCKS = list(_blocks())


def _cuda():
    import torch

    return torch.cuda.is_available()


@lru_cache(maxsize=None)
def _kernel_config(kernel):
    sys.path.insert(0, str(ROOT / "tools"))
    from kbuild.config import load_config

    return load_config(ROOT / kernel)


def _fill_card(doc, body):
    if not doc.endswith("CARD.md"):
        return body
    cfg = _kernel_config(doc.split("/")[0])
    return body.replace("{{ repo_id }}", cfg.repo_id).replace("{{ version }}", str(cfg.version))


@lru_cache(maxsize=None)
def _variant_root(kernel, cpu_too=False):
    """<kernel>/build, holding the variant of this torch (built here when missing: make test's ci-test step
    builds it first), and the CPU variant too with cpu_too (a block that asks for backend="cpu" on a GPU)."""
    from kbuild.variant import find_variants

    _kernel_config(kernel)  # puts tools/ on sys.path
    wanted = [None] + (["cpu"] if cpu_too else [])
    for backend in wanted:
        names = [v.name for v in find_variants(ROOT / kernel)]
        if (backend is None and names) or (backend == "cpu" and any("-cpu-" in n for n in names)):
            continue
        env = dict(_env(), **({"KBUILD_BACKEND": backend} if backend else {}))
        result = subprocess.run([sys.executable, "tools/kbuild", "variant", kernel], cwd=ROOT, capture_output=True,
                                text=True, timeout=1500, env=env)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return ROOT / kernel / "build"


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # python3 is this Python
    return env


def test_every_block_is_labeled():
    unlabeled = [p.id for p in BLOCKS if p.values[2] not in ("python", "bash", "text")]
    assert not unlabeled, f"label these blocks python, bash or text: {unlabeled}"
    assert sum(p.values[2] == "python" for p in BLOCKS) >= 10


@pytest.mark.parametrize("doc,line,lang,body,marker", [p for p in BLOCKS if p.values[2] == "python"])
def test_python_block_runs(doc, line, lang, body, marker):
    if marker == "gpu" and not _cuda():
        pytest.skip("marked `doc-test: gpu`: needs a CUDA GPU (run on the GPU machine)")
    code = _fill_card(doc, body)
    env = _env()
    used = [k for k in KERNELS if _kernel_config(k).repo_id in code or f'Path("{k}")' in code]
    if used:
        cpu_too = 'backend="cpu"' in code
        env["LOCAL_KERNELS"] = ":".join(f"{_kernel_config(k).repo_id}={_variant_root(k, cpu_too)}" for k in used)
    for k in used:
        code, n = re.subn(rf'LayerRepository\(repo_id="{_kernel_config(k).repo_id}", layer_name="(\w+)", version=\d+\)',
                          rf'LocalLayerRepository(repo_path=Path({str(ROOT / k)!r}), layer_name="\1")', code)
        if n:
            code = "from pathlib import Path\nfrom kernels import LocalLayerRepository\n" + code
    if marker != "gpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # what a machine without a GPU sees
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, f"{doc}:{line} failed:\n{code}\n--- stderr:\n{result.stderr[-3000:]}"


# ----------------------------------------------------------------------------------------------------------
# bash blocks


def _commands(body):
    """The block's commands: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", body)
    for raw in joined.splitlines():
        words = shlex.split(raw, comments=True)
        if words:
            yield words


@lru_cache(maxsize=None)
def _help_ok(*cmd):
    result = subprocess.run(list(cmd) + ["--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=_env())
    return result.returncode == 0


def _check_command(words):
    env_assignments = 0
    while env_assignments < len(words) and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[env_assignments]):
        env_assignments += 1
    words = words[env_assignments:]
    prog, args = words[0], words[1:]
    assert prog != "python", "`python` does not exist on a stock Debian/Ubuntu machine: write python3"
    if prog == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in args:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no make target {target}"
    elif prog in ("python3", "python3.11") or prog.endswith("/python"):
        if args[:2] == ["-m", "pytest"] or args[:2] == ["-m", "pip"]:
            pass
        elif args and args[0] == "tools/kbuild":
            assert len(args) > 1 and _help_ok(sys.executable, "tools/kbuild", args[1]), f"kbuild has no {args[1:2]}"
        else:
            assert args and (ROOT / args[0]).is_file(), f"{args[:1]} is not a file of the repository"
    elif prog == "kernels":
        cli = Path(sys.executable).with_name("kernels")
        cli = str(cli) if cli.exists() else shutil.which("kernels")
        assert cli and args and _help_ok(cli, args[0]), f"kernels {args[:1]}"
    elif prog == "nix":
        assert "--extra-experimental-features" in args and "nix-command flakes" in args, \
            "the Nix ci/setup.sh installs (Debian's 2.8) needs --extra-experimental-features 'nix-command flakes'"
        for a in args:
            if a.startswith("./") or a.startswith(".#"):
                path = ROOT / a.split("#")[0]
                assert (path / "flake.nix").is_file() if path.is_dir() else path.is_file(), f"no flake at {a}"
    elif prog in ("pip", "pip3"):
        raise AssertionError("use python3 -m pip (the venv's python: .venv/bin/python -m pip)")
    elif prog in ("bash", "sh"):
        assert args and (ROOT / args[0]).is_file(), f"{args[:1]} is not a file of the repository"
    elif prog in ("ln", "env", "git", "sudo", "apt-get", "export", "cd", "source", "."):
        pass
    elif prog.startswith(".venv/") or prog.startswith("./"):
        pass
    else:
        raise AssertionError(f"a command the doc test does not know how to check: {prog}")
    # Paths of the repository that a command names must exist (outputs of the commands excepted).
    for a in args:
        if re.fullmatch(r"(img2gray|gemm|ci|tools|benchmarks)/[\w./-]*", a) and not re.search(r"/(build|dist)/", a):
            assert (ROOT / a).exists() or "*" in a, f"{a} does not exist"


@pytest.mark.parametrize("doc,line,lang,body,marker", [p for p in BLOCKS if p.values[2] == "bash"])
def test_bash_block(doc, line, lang, body, marker):
    for words in _commands(_fill_card(doc, body)):
        _check_command(words)
    if marker == "run":
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=ROOT, capture_output=True, text=True,
                                timeout=900, env=_env())
        assert result.returncode == 0, f"{doc}:{line}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
