"""The dataplanes perfkit can measure, found by name: one package per network function.

Each subpackage ``perfkit/dataplanes/<name>/`` exports ``DATAPLANE``, an instance of
``perfkit.dataplane.Dataplane``. Adding a dataplane is adding a package (and its BPF program and
campaign file): nothing here or in the generic modules changes.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path

from perfkit.dataplane import Dataplane
from perfkit.encap import Encap
from perfkit.errors import ConfigError

#: The dataplane commands use when none is named.
DEFAULT = "pgwu"


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    """Every dataplane package (a subpackage that exports ``DATAPLANE``), sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if m.ispkg and hasattr(importlib.import_module(f"{__name__}.{m.name}"), "DATAPLANE")))


def get(name: str) -> Dataplane:
    """The dataplane called ``name``, or described by the file at that path (``perfkit.describe``:
    a path ending in .yaml/.yml or holding a ``/``); ConfigError lists the known ones."""
    from perfkit.describe.schema import is_description
    if is_description(name):
        return _described(str(Path(name).expanduser().resolve()))
    return _registered(name)


@lru_cache(maxsize=None)
def _described(path: str) -> Dataplane:
    from perfkit import describe
    return describe.load(path)


@lru_cache(maxsize=None)
def _registered(name: str) -> Dataplane:
    if name not in names():
        raise ConfigError("dataplane", name, names())
    dp = importlib.import_module(f"{__name__}.{name}").DATAPLANE
    assert isinstance(dp, Dataplane) and dp.name == name, f"{name}: DATAPLANE must be its Dataplane"
    return dp


def all_params() -> dict[str, list[str]]:
    """Parameter name -> the dataplanes that have it (the CLI offers the union as options)."""
    out: dict[str, list[str]] = {}
    for n in names():
        for p in get(n).params:
            out.setdefault(p.name, []).append(n)
    return out


@lru_cache(maxsize=None)
def encapsulations() -> tuple[Encap, ...]:
    """Every tunnel some dataplane's frames carry (``Dataplane.encaps``), each once, in name order of
    the dataplanes: what the sink and the signature finder walk through."""
    return tuple(dict.fromkeys(e for n in names() for e in get(n).encaps))
