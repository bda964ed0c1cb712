"""Upload build variants to the Hub the way ``kernel-builder upload`` does.

* target: ``--repo-id`` or ``[general.hub] repo-id`` of build.toml, repo type ``kernel``;
* version branch: ``--branch`` or ``v<version>`` from the variants' metadata.json (all must agree);
  it receives ``build/<variant>/**`` and ``benchmarks/benchmark*.py``;
* ``main`` receives the card as ``README.md`` (``result/CARD.md`` or ``build/CARD.md``, else the kernel's
  ``CARD.md`` template rendered now, else the kernel's ``README.md``);
* variants are the dirs holding ``metadata.json`` under ``result/``, else ``build/``, else the dir itself.

Where ``kernel-builder`` is on PATH a real upload is delegated to ``kernel-builder upload``. Auth: the
``HF_TOKEN`` environment variable (or ``hf auth login``); publishing under ``kernels-community`` needs
write rights in that organisation. ``--dry-run`` only prints the plan and never touches the network.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

from .config import load_config
from .variant import find_variants

MAIN_BRANCH = "main"
REPO_TYPE = "kernel"


@dataclasses.dataclass
class UploadPlan:
    repo_id: str
    repo_type: str
    branch: str
    build_dir: Path
    variants: list[Path]
    # (local file, path in repo) per branch
    files: dict[str, list[tuple[Path, str]]]

    def describe(self) -> str:
        lines = [f"target: https://huggingface.co/kernels/{self.repo_id} (repo type {self.repo_type})"]
        lines.append(f"variants ({len(self.variants)}): " + ", ".join(v.name for v in self.variants))
        for branch, files in self.files.items():
            lines.append(f"branch {branch}: {len(files)} file(s)")
            for local, remote in files:
                lines.append(f"  {remote}  <-  {local}  ({local.stat().st_size} bytes)")
        return "\n".join(lines)


def _branch_from_metadata(variants: list[Path]) -> str:
    versions = {json.loads((v / "metadata.json").read_text())["version"] for v in variants}
    if len(versions) != 1:
        raise RuntimeError(f"build variants disagree on the kernel version: {sorted(versions)}; rebuild them")
    return f"v{versions.pop()}"


def _card(kernel_dir: Path, build_dir: Path) -> Path | None:
    """The rendered card (result/ or the variants' dir), else CARD.md rendered now, else the README."""
    for candidate in (kernel_dir / "result" / "CARD.md", build_dir / "CARD.md"):
        if candidate.is_file():
            return candidate
    if (kernel_dir / "CARD.md").is_file():  # a Jinja template: never upload it unrendered
        from .card import render_card

        return render_card(load_config(kernel_dir), out_dir=build_dir)
    readme = kernel_dir / "README.md"
    return readme if readme.is_file() else None


def plan_upload(kernel_dir, repo_id: str | None = None, branch: str | None = None) -> UploadPlan:
    kernel_dir = Path(kernel_dir).resolve()
    variants = find_variants(kernel_dir)
    if not variants:
        raise RuntimeError(
            f"no build variants (dirs with metadata.json) in {kernel_dir}/result or {kernel_dir}/build: "
            f"run `python tools/kbuild variant {kernel_dir.name}` (or `nix build`) first"
        )
    cfg = load_config(kernel_dir)
    repo_id = repo_id or cfg.repo_id
    if not repo_id:
        raise RuntimeError("no `[general.hub] repo-id` in build.toml; pass --repo-id")
    branch = branch or _branch_from_metadata(variants)
    build_dir = variants[0].parent

    version_files: list[tuple[Path, str]] = []
    for v in variants:
        for f in sorted(p for p in v.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            version_files.append((f, f"build/{f.relative_to(build_dir).as_posix()}"))
    bench = kernel_dir / "benchmarks"
    if bench.is_dir():
        for f in sorted(bench.glob("benchmark*.py")):
            version_files.append((f, f"benchmarks/{f.name}"))
    files = {branch: version_files}
    card = _card(kernel_dir, build_dir)
    if card is not None:
        files = {MAIN_BRANCH: [(card, "README.md")], **files}
    return UploadPlan(repo_id, REPO_TYPE, branch, build_dir, variants, files)


def require_token(plan: UploadPlan) -> str:
    """The Hub token an upload will use (``HF_TOKEN``, else the one ``hf auth login`` saved); stops before
    any network call when there is none."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        try:
            from huggingface_hub import get_token  # reads the saved login; no network
        except ImportError:
            get_token = None
        token = get_token() if get_token else None
    if not token:
        org = plan.repo_id.split("/")[0]
        raise RuntimeError(
            f"no Hugging Face token, nothing was sent: set HF_TOKEN to a token with write access to {org} "
            "(https://huggingface.co/settings/tokens), or log in once with `hf auth login`")
    return token


def upload(plan: UploadPlan, kernel_dir, private: bool = False, create_pr: bool = False, use_kernel_builder: bool = True) -> None:
    """Send the plan to the Hub (network; needs HF_TOKEN with write access to the target)."""
    require_token(plan)
    if use_kernel_builder and shutil.which("kernel-builder") and not create_pr:
        cmd = ["kernel-builder", "upload", str(kernel_dir), "--repo-id", plan.repo_id, "--branch", plan.branch,
               "--repo-type", plan.repo_type] + (["--private"] if private else [])
        print("kbuild: delegating to", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        return

    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(library_name="kbuild")
    try:
        api.create_repo(plan.repo_id, repo_type=plan.repo_type, private=private, exist_ok=True)
    except HfHubHTTPError as e:
        if e.response is not None and e.response.status_code == 403:
            raise RuntimeError(
                f"no write access to {plan.repo_id}: publishing under kernels-community needs the org's rights "
                "(request them in a discussion at https://huggingface.co/spaces/kernels-community/README), "
                "or pass --create-pr"
            ) from e
        raise
    refs = api.list_repo_refs(plan.repo_id, repo_type=plan.repo_type)
    new_branch = plan.branch not in {b.name for b in refs.branches}
    if new_branch and not create_pr:
        api.create_branch(plan.repo_id, branch=plan.branch, repo_type=plan.repo_type, exist_ok=True)

    for branch, files in plan.files.items():
        ops: list = [CommitOperationAdd(path_in_repo=remote, path_or_fileobj=str(local)) for local, remote in files]
        if branch == plan.branch and not new_branch:
            # Replace the uploaded variants wholesale: drop their files that this build no longer has.
            keep = {remote for _, remote in files}
            prefixes = tuple(f"build/{v.name}/" for v in plan.variants)
            existing = api.list_repo_files(plan.repo_id, repo_type=plan.repo_type, revision=branch)
            ops += [CommitOperationDelete(path_in_repo=f) for f in existing
                    if f not in keep and (f.startswith(prefixes) or f.startswith("benchmarks/benchmark"))]
        for start in range(0, len(ops), 1000):
            api.create_commit(
                plan.repo_id,
                operations=ops[start:start + 1000],
                commit_message="Uploaded with kbuild",
                repo_type=plan.repo_type,
                revision=branch,
                create_pr=create_pr,
            )
    print(f"Kernel uploaded: https://huggingface.co/kernels/{plan.repo_id}/tree/{plan.branch}")
