"""kbuild command line: ``python tools/kbuild <command> <kernel-dir>`` from the repository root
(equivalently ``PYTHONPATH=tools python -m kbuild …``).

  variant    build <kernel>/build/<variant>/ (kernel-builder's flat layout + metadata.json), ABI-check it
             and render the card (build/CARD.md)
  check-abi  check every .so of every variant: manylinux_2_28 symbol versions, Python 3.9 stable ABI
  upload     send build/ to branch v<version> and the card to main of the kernel's Hub repo (--dry-run)
  wheel      build a variant and package it as an installable wheel (dist/ by default)
"""

from __future__ import annotations

import argparse
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
    from kbuild.upload import plan_upload, upload

    plan = plan_upload(args.kernel_dir, repo_id=args.repo_id, branch=args.branch)
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing was sent")
        return 0
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

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        print(f"kbuild {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
