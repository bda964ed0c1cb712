"""The Hub card: ``<kernel>/CARD.md`` is a Jinja template that kernel-builder renders into
``build/CARD.md`` (variables: repo_id, functions, layers, has_benchmark, upstream, license); upload
sends the rendered card to the repo's ``main`` branch as ``README.md``."""

from __future__ import annotations

import re
from pathlib import Path

from .config import KernelConfig


def public_names(cfg: KernelConfig) -> list[str] | None:
    """Names in ``__all__`` of the package's ``__init__.py`` (what kernel-builder lists as functions)."""
    init = cfg.package_dir / "__init__.py"
    if not init.is_file():
        return None
    text = init.read_text()
    match = re.search(r"__all__\s*=\s*\[([^\]]*)\]", text)
    if not match:
        return None
    return re.findall(r"[\"']([^\"']+)[\"']", match.group(1)) or None


def layer_names(cfg: KernelConfig) -> list[str] | None:
    """nn.Module classes defined in the package's ``layers`` module or package, if any."""
    candidates = [cfg.package_dir / "layers.py", cfg.package_dir / "layers" / "__init__.py"]
    for path in candidates:
        if path.is_file():
            return re.findall(r"^class (\w+)\(", path.read_text(), flags=re.M) or None
    return None


def render_card(cfg: KernelConfig, out_dir: Path | None = None) -> Path | None:
    """Render ``<kernel>/CARD.md`` into ``<out_dir or kernel/build>/CARD.md``; None if there is no template."""
    template = cfg.root / "CARD.md"
    if not template.is_file():
        return None
    import jinja2  # a torch dependency

    # StrictUndefined: the template may only use the variables kernel-builder passes too.
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.from_string(template.read_text()).render(
        repo_id=cfg.repo_id or f"kernels-community/{cfg.name}",
        functions=public_names(cfg),
        layers=layer_names(cfg),
        has_benchmark=(cfg.root / "benchmarks" / "benchmark.py").is_file(),
        upstream=cfg.upstream,
        license=cfg.license,
    )
    out_dir = Path(out_dir) if out_dir is not None else cfg.root / "build"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "CARD.md"
    path.write_text(text)
    return path
