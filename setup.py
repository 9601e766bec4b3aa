"""The two build steps pyproject.toml cannot declare (everything else is there).

1. The repository's ``bpf/``, ``notebooks/``, ``campaigns/`` and ``trex_profiles/`` go into the
   wheel as ``perfkit/_data/<dir>/`` (``perfkit.paths.FILES_ROOT``). They stay at the top of the
   repository, where ``make``, the notebooks' users and the other tools expect them.
2. The git commit the wheel is built from goes into ``perfkit/_data/build.json``, since an installed
   perfkit has no repository to ask (``perfkit --version``). An sdist carries the commit it was made
   from in ``build-info.json``, for a wheel built from it.

An editable install runs from the checkout, which has both, so it gets neither.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
#: Top-level directories shipped as package data: the files of each (globs relative to it).
DATA: dict[str, tuple[str, ...]] = {
    "bpf": ("*.bpf.c", "include/*.h"),
    "notebooks": ("*.ipynb",),
    "campaigns": ("*.yaml",),
    "trex_profiles": ("*.py", "*.md"),
}
SDIST_BUILD_INFO = "build-info.json"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def build_info() -> dict[str, object]:
    """The commit of the source being built: the checkout's, else the sdist's record, else unknown."""
    full = _git("rev-parse", "HEAD") if (ROOT / ".git").exists() else None
    if full:
        status = _git("status", "--porcelain", "--untracked-files=no")
        return {"git_sha": _git("rev-parse", "--short", "HEAD") or full[:7], "git_sha_full": full,
                "git_dirty": bool(status) if status is not None else None}
    if (ROOT / SDIST_BUILD_INFO).is_file():
        return json.loads((ROOT / SDIST_BUILD_INFO).read_text())
    return {"git_sha": "unknown", "git_sha_full": "unknown", "git_dirty": None}


class BuildPy(build_py):
    """build_py, then the shipped directories and build.json into ``perfkit/_data``."""

    def run(self) -> None:
        staged = Path(self.build_lib) / "perfkit"
        if not self.editable_mode and staged.exists():
            shutil.rmtree(staged)  # a previous build's: a module moved or removed since must not ship
        super().run()
        if self.editable_mode:
            return
        dest = staged / "_data"
        for top, patterns in DATA.items():
            files = [f for pattern in patterns for f in sorted((ROOT / top).glob(pattern))]
            if not files:
                raise SystemExit(f"setup.py: no {top}/{'|'.join(patterns)} in {ROOT}: the wheel would lack them")
            for f in files:
                target = dest / top / f.relative_to(ROOT / top)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
        (dest / "build.json").write_text(json.dumps(build_info()) + "\n")


class Sdist(sdist):
    """sdist, with the commit it is made from (a wheel built from it has no repository)."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        (Path(base_dir) / SDIST_BUILD_INFO).write_text(json.dumps(build_info()) + "\n")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
