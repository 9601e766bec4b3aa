"""Shared fixtures. The suite needs root (BPF, namespaces) and the objects built by `make bpf`.

Which target runs a test (markers in pyproject.toml):
- no marker: `make test`, which must stay within 15 minutes on a clean clone, set-up included. It
  lists its 15 slowest tests; keep a test under ~10 s (setup included: a module fixture's time
  counts once, for its first test).
- `slow`: `make test-slow`. For what takes longer: a variant, sweep or repeat of a behaviour that a
  fast test in `make test` already checks (a parametrized variant is marked with
  `pytest.param(..., marks=pytest.mark.slow)`), live calibrations, drill-like runs. A behaviour
  with no fast test stays in `make test`: make its test faster instead (a module-scoped fixture
  sharing one testbed or server, shorter trials where the assertion does not depend on them).
- `drill`: `make test-drills`, the reliability drills (stop signals at random moments).
`.ci/run` runs all three.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.script_forks import ScriptForks

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bpf"

# The Python processes the tests start (the CLI's, papermill's kernels) cache the bytecode of what
# they import (perfkit) in a directory of the session's, as Python does in __pycache__ unless
# PYTHONDONTWRITEBYTECODE is set (some machines' environments set it: each process would compile
# perfkit from source, ~0.2 s of CPU). The source tree is left as it is.
_BYTECODE = tempfile.mkdtemp(prefix="perfkit-test-pyc-")
atexit.register(shutil.rmtree, _BYTECODE, ignore_errors=True)
os.environ["PYTHONPYCACHEPREFIX"] = _BYTECODE
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


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
