"""Shared fixtures. The suite needs root (BPF, namespaces) and the objects built by `make bpf`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bpf"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.geteuid() != 0:
        raise pytest.UsageError("perfkit's tests use the real kernel (BPF, XDP, namespaces): run them as root")
    if not (BUILD / "pgwu.o").exists():
        raise pytest.UsageError("BPF objects missing: run `make bpf` (or `make test`, which does it)")
