"""The Hub card: ``<kernel>/CARD.md`` is a Jinja template that kernel-builder renders into ``build/CARD.md``;
upload sends the rendered card to the repo's ``main`` branch as ``README.md``.

The variables are kernel-builder's (``kernel-builder/src/card.rs``): ``repo_id``, ``version``, ``functions``
(names in the package's ``__all__`` except ``layers``), ``layers`` (classes of the ``layers`` module, only
when ``__all__`` exports ``layers``), ``has_benchmark``, ``upstream``, ``source`` and ``license`` (the
build.toml license in lower case, the Hub's license id: ``apache-2.0``)."""

from __future__ import annotations

import ast
from pathlib import Path

from .config import KernelConfig


def _all_names(cfg: KernelConfig) -> list[str] | None:
    init = cfg.package_dir / "__init__.py"
    if not init.is_file():
        return None
    for stmt in ast.parse(init.read_text()).body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            if isinstance(stmt.value, ast.List):
                names = [e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                return names or None
    return None


def public_names(cfg: KernelConfig) -> list[str] | None:
    """The functions kernel-builder lists: ``__all__`` without ``layers``."""
    names = [n for n in _all_names(cfg) or [] if n != "layers"]
    return names or None


def layer_names(cfg: KernelConfig) -> list[str] | None:
    """Classes of the package's ``layers`` module or package, when ``__all__`` exports ``layers``."""
    if "layers" not in (_all_names(cfg) or []):
        return None
    for path in (cfg.package_dir / "layers" / "__init__.py", cfg.package_dir / "layers.py"):
        if path.is_file():
            classes = [s.name for s in ast.parse(path.read_text()).body if isinstance(s, ast.ClassDef)]
            return classes or None
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
        version=cfg.version,
        functions=public_names(cfg),
        layers=layer_names(cfg),
        has_benchmark=(cfg.root / "benchmarks" / "benchmark.py").is_file(),
        upstream=cfg.upstream,
        source=cfg.source,
        license=cfg.license.lower(),
    )
    out_dir = Path(out_dir) if out_dir is not None else cfg.root / "build"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "CARD.md"
    path.write_text(text)
    return path
