"""Which perfkit produced a figure: the version and the git commit of its source.

From a checkout the commit is the checkout's (``git rev-parse``, and whether tracked files differ
from it); an installed wheel has no repository, so its build recorded them (``setup.py`` writes
``paths.BUILD_INFO_FILE``).
"""
from __future__ import annotations

import functools
import json
import subprocess
from typing import Any

from perfkit.paths import BUILD_INFO_FILE, CHECKOUT

#: perfkit's version (the package metadata's too: pyproject.toml reads it from here).
VERSION = "0.1.0"
UNKNOWN = "unknown"


def git(*args: str) -> str | None:
    """``git args`` in perfkit's own checkout; None when it runs from none (or git is missing)."""
    if CHECKOUT is None or not (CHECKOUT / ".git").exists():   # never a repository that merely holds a venv
        return None
    try:
        out = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


@functools.lru_cache(maxsize=1)
def build_info() -> dict[str, Any]:
    """What the wheel's build recorded (``git_sha``, ``git_sha_full``, ``git_dirty``); {} in a checkout."""
    try:
        return json.loads(BUILD_INFO_FILE.read_text())
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """The short commit of perfkit's source: the checkout's HEAD, else the built wheel's, else ``unknown``."""
    return git("rev-parse", "--short", "HEAD") or build_info().get("git_sha") or UNKNOWN


def perfkit_version() -> dict[str, Any]:
    """perfkit's version and commit: ``version``, ``git_sha`` (short), ``git_sha_full`` and
    ``git_dirty`` (tracked files differ from the commit; None when not known)."""
    full = git("rev-parse", "HEAD")
    if full is None:
        info = build_info()
        return {"version": VERSION, "git_sha": info.get("git_sha", UNKNOWN),
                "git_sha_full": info.get("git_sha_full", UNKNOWN), "git_dirty": info.get("git_dirty")}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"version": VERSION, "git_sha": git_sha(), "git_sha_full": full, "git_dirty": bool(status)}


def describe() -> str:
    """One line for ``perfkit --version``: ``perfkit 0.1.0 (git 72058ed)``, or ``(git 72058ed,
    modified)`` when the source differed from that commit."""
    v = perfkit_version()
    dirty = ", modified" if v["git_dirty"] else ""
    return f"perfkit {v['version']} (git {v['git_sha']}{dirty})"
