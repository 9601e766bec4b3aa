"""Which perfkit produced a figure: the package version and the git commit of the checkout."""
from __future__ import annotations

import functools
import subprocess
from typing import Any

from perfkit.paths import REPO_ROOT


def git(*args: str) -> str | None:
    """``git args`` in perfkit's own checkout; None when it is not one (or git is missing)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """``git rev-parse --short HEAD`` of perfkit's checkout, ``unknown`` if it is not one."""
    return git("rev-parse", "--short", "HEAD") or "unknown"


def perfkit_version() -> dict[str, Any]:
    """perfkit's package version and git commit (``unknown`` outside a checkout)."""
    try:
        from importlib.metadata import version
        pkg = version("perfkit")
    except Exception:  # noqa: BLE001 - not installed
        pkg = "unknown"
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"version": pkg, "git_sha": git_sha(), "git_sha_full": git("rev-parse", "HEAD") or "unknown",
            "git_dirty": bool(status) if status is not None else (False if git("rev-parse", "HEAD") else None)}
