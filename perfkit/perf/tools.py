"""The tools perf attribution runs: ``perf``, ``setpriv`` and inferno's ``inferno-collapse-perf`` and
``inferno-flamegraph`` (the Rust port of Brendan Gregg's FlameGraph tools, ``cargo install
inferno``), where to find them, and the error that names a missing one."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from perfkit.errors import PerfkitError
from perfkit.paths import TOOLS_DIR

#: The inferno release perfkit is tested with: ``cargo install inferno --version 0.12.8 --locked --root build/tools``.
INFERNO_VERSION = "0.12.8"
INSTALL_INFERNO = "make tools"


class PerfError(PerfkitError):
    """perf or inferno is missing, or perf could not record (the message names what and why)."""


def find_tool(name: str) -> str | None:
    """The path of ``name``: ``build/tools/bin`` (``make setup``), ``~/.cargo/bin``, then ``PATH``."""
    for d in (TOOLS_DIR, Path.home() / ".cargo" / "bin"):
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return shutil.which(name)


def check_available(fold: bool = True) -> dict[str, str]:
    """The tools perf attribution needs, ``{name: path}`` (``fold=False``: recording only, no
    inferno); a one-line ``PerfError`` naming the first one missing (and how to install it) otherwise."""
    found: dict[str, str] = {}
    tools = [("perf", "apt-get install linux-perf (Debian) or linux-tools-$(uname -r) (Ubuntu)"),
             ("setpriv", "apt-get install util-linux")]
    if fold:
        tools += [("inferno-collapse-perf", INSTALL_INFERNO), ("inferno-flamegraph", INSTALL_INFERNO)]
    for name, install in tools:
        path = find_tool(name)
        if not path:
            raise PerfError(f"perf attribution needs {name}, not found in {TOOLS_DIR}, ~/.cargo/bin or PATH; "
                            f"install it: {install}")
        found[name] = path
    return found


def last_line(raw: bytes) -> str:
    """The last line a tool wrote (its error, for inferno), or ``no output``."""
    lines = [ln.strip() for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
