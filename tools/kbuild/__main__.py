"""kbuild command line: ``python tools/kbuild <command> <kernel-dir>`` from the repository root
(equivalently ``PYTHONPATH=tools python -m kbuild …``).

  variant    build <kernel>/build/<variant>/ (kernel-builder's flat layout + metadata.json), ABI-check it
             and render the card (build/CARD.md)
  check-abi  check every .so of every variant: manylinux_2_28 symbol versions, Python 3.9 stable ABI
  upload     send build/ to branch v<version> and the card to main of the kernel's Hub repo (--dry-run)
  wheel      build a variant and package it as an installable wheel (dist/ by default)
  ci-test    what kernels-community's CI runs (`nix run .#ci-test`): build the variant, then
             `pytest tests -m kernels_ci` on the staged sources with the variant on PYTHONPATH and LOCAL_KERNELS
             (arguments after `--` go to pytest); once with the installed `kernels`, once with the
             `kernels` API of kernel-builder's pin (--kernels-api picks one)
  stage      copy the kernel's Nix source set into a folder and check every include under kernel-builder's rules
  flags      compile flags of one build.toml section under kernel-builder's rules (one per line, for scripts)
  sources    the compiled sources of one build.toml section (one per line)
  up-to-date exit 0 when the editable install is built from the current sources and toolchain
  fetch-cutlass  put the CUTLASS release the kernel's build.toml depends on into the kbuild cache
  install-nvcc   put CUDA 13.0's nvcc (PyPI wheels; --cuda 13.2 for another) into the kbuild cache, print its path
  install-pinned-kernels  put the `kernels` release of kernel-builder's pinned API into the kbuild cache
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    # `python tools/kbuild …` runs this file as a script: make `import kbuild` find the package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "kbuild"  # noqa: A001

from kbuild.backend import BACKENDS  # noqa: E402


def _abi_check(variant_dir: Path) -> int:
    from kbuild.abi import MANYLINUX, PYTHON_ABI, check_variant

    objects, problems = check_variant(variant_dir)
    for p in problems:
        print(f"ABI: {p}", file=sys.stderr)
    status = "FAIL" if problems else "ok"
    print(f"kbuild: ABI check ({MANYLINUX}, abi3 {PYTHON_ABI}) of {variant_dir.name}: {len(objects)} object(s), {status}")
    return 1 if problems else 0


def cmd_variant(args) -> int:
    from kbuild.card import render_card
    from kbuild.config import load_config
    from kbuild.variant import build_variant

    v = build_variant(args.kernel_dir, backend=args.backend, out_root=args.out, verbose=args.verbose)
    print(f"kbuild: wrote {v.path}")
    card = render_card(load_config(args.kernel_dir), out_dir=v.path.parent)
    if card:
        print(f"kbuild: rendered {card}")
    return 0 if args.skip_abi_check else _abi_check(v.path)


def cmd_check_abi(args) -> int:
    from kbuild.variant import find_variants

    variants = find_variants(args.kernel_dir)
    if not variants:
        print(f"kbuild: no build variants found under {args.kernel_dir}", file=sys.stderr)
        return 1
    return max(_abi_check(v) for v in variants)


def cmd_upload(args) -> int:
    from kbuild.upload import plan_upload, require_token, upload

    plan = plan_upload(args.kernel_dir, repo_id=args.repo_id, branch=args.branch)
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing was sent")
        return 0
    require_token(plan)
    upload(plan, args.kernel_dir, private=args.private, create_pr=args.create_pr,
           use_kernel_builder=not args.no_kernel_builder)
    return 0


def cmd_wheel(args) -> int:
    from kbuild.variant import build_variant
    from kbuild.wheel import build_wheel

    out = Path(args.out) if args.out else Path(args.kernel_dir).resolve() / "dist"
    v = build_variant(args.kernel_dir, backend=args.backend, out_root=out / "variants")
    if _abi_check(v.path):
        print("kbuild: not tagging a wheel manylinux_2_28 that fails the ABI check", file=sys.stderr)
        return 1
    path = build_wheel(args.kernel_dir, v, out)
    print(f"kbuild: wrote {path}")
    return 0


def cmd_stage(args) -> int:
    from kbuild.config import load_config
    from kbuild.rules import installed_torch_version
    from kbuild.stage import stage_and_check

    cfg = load_config(args.kernel_dir)
    dest = stage_and_check(cfg, Path(args.out), torch_version=installed_torch_version(),
                           warn=lambda m: print(m, file=sys.stderr))
    print(dest)
    return 0


def cmd_flags(args) -> int:
    from kbuild.cutlass import locate, required_version
    from kbuild.config import load_config
    from kbuild.rules import (RELEASE_FLAGS, cuda_arch_flags, cxx_standard, define_flags, defines_for, include_roots,
                              installed_torch_version, nvcc_common_flags, section_cuda_archs, section_of)

    cfg = load_config(args.kernel_dir)
    section = section_of(cfg, args.section)
    backend = section.backend if section is not None else args.backend
    if backend is None:
        print("kbuild flags: the torch section needs --backend", file=sys.stderr)
        return 1
    includes = section.include if section is not None else cfg.torch_include
    flags = [f"-std={cxx_standard(installed_torch_version())}", *RELEASE_FLAGS]
    flags += define_flags(defines_for([backend], args.ops or f"_{cfg.python_name}_{backend}_check"))
    if args.lang == "cuda":
        flags += nvcc_common_flags(None)
        flags += list(section.cuda_flags) if section is not None else []
    elif args.lang == "hip":
        flags += list(section.hip_flags) if section is not None else []
    else:
        flags += list(cfg.torch_cxx_flags) if section is None else list(section.cxx_flags)
    flags += [f"-I{p}" for p in include_roots(Path(args.stage).resolve(), includes)]
    version = required_version(section.depends) if section is not None and backend == "cuda" else None
    if version:
        flags += ["-isystem", str(locate(version))]
    if args.cuda_version and args.lang == "cuda" and section is not None:
        flags += cuda_arch_flags(section_cuda_archs(section.cuda_capabilities, args.cuda_version))
    print("\n".join(flags))
    return 0


def cmd_sources(args) -> int:
    from kbuild.config import load_config
    from kbuild.rules import section_of

    cfg = load_config(args.kernel_dir)
    section = section_of(cfg, args.section)
    print("\n".join(cfg.torch_compiled_sources if section is None else section.compiled_sources))
    return 0


def cmd_up_to_date(args) -> int:
    from kbuild.extension import editable_up_to_date

    ok, why = editable_up_to_date(args.kernel_dir)
    print(why)
    return 0 if ok else 1


def cmd_fetch_cutlass(args) -> int:
    from kbuild.config import load_config
    from kbuild.cutlass import fetch, required_version

    for kernel_dir in args.kernel_dir:
        cfg = load_config(kernel_dir)
        version = required_version([d for k in cfg.kernels for d in k.depends])
        if version:
            fetch(version, log=lambda m: print(f"kbuild: {cfg.name}: {m}"))
    return 0


def cmd_install_nvcc(args) -> int:
    from kbuild.toolchain import install_cuda

    for cuda in args.cuda:
        print(install_cuda(log=lambda m: print(f"kbuild: {m}", file=sys.stderr), cuda=cuda))
    return 0


def cmd_ci_test(args) -> int:
    from kbuild.citest import run_ci_test

    from kbuild.citest import KERNELS_APIS

    apis = KERNELS_APIS if args.kernels_api == "both" else (args.kernels_api,)
    return run_ci_test(args.kernel_dir, backend=args.backend, pytest_args=args.pytest_args,
                       require_tests=args.require_tests, apis=apis)


def cmd_install_pinned_kernels(args) -> int:
    from kbuild.citest import install_pinned_kernels

    print(install_pinned_kernels(log=lambda m: print(f"kbuild: {m}", file=sys.stderr)))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kbuild", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("variant", help="build <kernel>/build/<variant>/")
    p.add_argument("kernel_dir")
    p.add_argument("--backend", choices=BACKENDS, help="default: the installed torch's (KBUILD_BACKEND)")
    p.add_argument("--out", type=Path, help="directory receiving <variant>/ (default <kernel>/build)")
    p.add_argument("--skip-abi-check", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_variant)

    p = sub.add_parser("check-abi", help="ABI-check every variant of a kernel")
    p.add_argument("kernel_dir")
    p.set_defaults(func=cmd_check_abi)

    p = sub.add_parser("upload", help="upload build variants and the card to the Hub")
    p.add_argument("kernel_dir")
    p.add_argument("--repo-id", help="default: [general.hub] repo-id of build.toml")
    p.add_argument("--branch", help="default: v<version> from metadata.json")
    p.add_argument("--dry-run", action="store_true", help="print every file and the target; send nothing")
    p.add_argument("--private", action="store_true")
    p.add_argument("--create-pr", action="store_true", help="open pull requests instead of committing")
    p.add_argument("--no-kernel-builder", action="store_true", help="use huggingface_hub even if kernel-builder is installed")
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("wheel", help="build an installable wheel of one variant")
    p.add_argument("kernel_dir")
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--out", help="output directory (default <kernel>/dist)")
    p.set_defaults(func=cmd_wheel)

    p = sub.add_parser("ci-test", help="kernels-community's CI test run against a freshly built variant")
    p.add_argument("kernel_dir")
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--require-tests", action="store_true", help="fail when no test is marked kernels_ci")
    p.add_argument("--kernels-api", choices=("both", "current", "pinned"), default="both",
                   help="run with the installed kernels, the pinned revision's API (PyPI release in the kbuild "
                        "cache), or both (default)")
    p.set_defaults(func=cmd_ci_test, pytest_args=[])

    p = sub.add_parser("stage", help="stage the Nix source set and check its includes")
    p.add_argument("kernel_dir")
    p.add_argument("--out", required=True, help="staging folder (made to hold exactly the source set)")
    p.set_defaults(func=cmd_stage)

    p = sub.add_parser("flags", help="compile flags of one section under kernel-builder's rules")
    p.add_argument("kernel_dir")
    p.add_argument("section", help="`torch` or the <name> of a [kernel.<name>] table")
    p.add_argument("--stage", required=True, help="the staged tree the include roots point into")
    p.add_argument("--lang", choices=("cxx", "cuda", "hip"), default="cxx")
    p.add_argument("--backend", choices=BACKENDS, help="for the torch section: the backend it is built for")
    p.add_argument("--ops", help="TORCH_EXTENSION_NAME (default _<pkg>_<backend>_check)")
    p.add_argument("--cuda-version", help="with --lang cuda: also the -gencode flags kernel-builder uses with this "
                   "CUDA toolkit (the section's cuda-capabilities intersected with the toolkit's, or its default list)")
    p.set_defaults(func=cmd_flags)

    p = sub.add_parser("sources", help="the compiled sources of one build.toml section, one per line")
    p.add_argument("kernel_dir")
    p.add_argument("section", help="`torch` or the <name> of a [kernel.<name>] table")
    p.set_defaults(func=cmd_sources)

    p = sub.add_parser("up-to-date", help="is the editable install current? (exit 0: yes)")
    p.add_argument("kernel_dir")
    p.set_defaults(func=cmd_up_to_date)

    p = sub.add_parser("fetch-cutlass", help="cache the CUTLASS headers build.toml depends on")
    p.add_argument("kernel_dir", nargs="+")
    p.set_defaults(func=cmd_fetch_cutlass)

    p = sub.add_parser("install-pinned-kernels", help="cache the kernels release of kernel-builder's pinned API")
    p.set_defaults(func=cmd_install_pinned_kernels)

    p = sub.add_parser("install-nvcc", help="cache CUDA 13.0's nvcc from PyPI and print its path")
    p.add_argument("--cuda", nargs="+", default=["13.0"], help="CUDA releases (13.0, 13.2; default 13.0)")
    p.set_defaults(func=cmd_install_nvcc)

    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:  # ci-test: what follows `--` goes to pytest
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = parser.parse_args(argv)
    if extra:
        if args.command != "ci-test":
            parser.error("arguments after -- are for ci-test only")
        args.pytest_args = extra
    try:
        return args.func(args)
    except (RuntimeError, FileNotFoundError, ValueError, subprocess.CalledProcessError) as e:
        print(f"kbuild {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
