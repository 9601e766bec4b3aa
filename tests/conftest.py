"""Shared fixtures. The suite needs root (BPF, namespaces) and the objects built by `make bpf`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.script_forks import ScriptForks

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bpf"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.geteuid() != 0:
        raise pytest.UsageError("perfkit's tests use the real kernel (BPF, XDP, namespaces): run them as root")
    if not (BUILD / "pgwu.o").exists():
        raise pytest.UsageError("BPF objects missing: run `make bpf` (or `make test`, which does it)")


@pytest.fixture(scope="session")
def perfkit_script() -> Iterator[ScriptForks]:
    """``.venv/bin/perfkit`` processes forked from one server that has imported perfkit's third-party
    libraries (``tests/script_forks.py``): ``perfkit_script.run(argv, env=..., cwd=...)`` is
    ``subprocess.run([PERFKIT, *argv], capture_output=True, text=True)`` without 1.3 s of imports."""
    with ScriptForks(ROOT / ".venv" / "bin" / "perfkit") as forks:
        yield forks


@pytest.fixture(scope="session")
def perfkit_module() -> Iterator[ScriptForks]:
    """The same for ``python -m perfkit``."""
    with ScriptForks("perfkit", module=True) as forks:
        yield forks
