"""The dataplanes perfkit can measure, found by name through the entry-point group
``perfkit.dataplanes`` (as pytest finds its plugins and papermill its engines).

Any installed package registers one in its ``pyproject.toml``::

    [project.entry-points."perfkit.dataplanes"]
    mylb = "mylb.perfkit:DATAPLANE"

The object named is a ``perfkit.dataplane.Dataplane`` instance, or a subclass that takes no
arguments; its ``name`` is the entry point's name and its ``api_version`` is
``perfkit.dataplane.API_VERSION``. perfkit's own three (``perfkit/dataplanes/<name>/``) register
through the same group. A plugin that fails to import, names something else or was written for
another version is left out and reported in one line by ``broken()`` (``perfkit dataplanes``
lists both); the others still load. A dataplane is imported when first asked for: ``get(name)``
imports that one only, ``registered()`` names them all (entry points' names) without importing any,
and ``names()``, ``broken()`` and ``origins()`` import them all. docs/dataplane-api.md is the interface.
"""
from __future__ import annotations

import importlib.metadata
import traceback
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from perfkit.dataplane import API_VERSION, Dataplane
from perfkit.encap import Encap
from perfkit.errors import ConfigError

#: The entry-point group dataplanes register in.
GROUP = "perfkit.dataplanes"
#: The dataplane commands use when none is named.
DEFAULT = "pgwu"


@dataclass(frozen=True)
class Origin:
    """Where an installed dataplane comes from."""

    name: str
    """Its registry name (the entry point's)."""
    value: str
    """The entry point's object reference (``module:attribute``)."""
    distribution: str | None
    """The installed package that registers it (``perfkit``, ``perfkit-demo-plugin``)."""
    version: str | None
    """That package's version."""
    file: str | None
    """The file of the module that defines it (None when it did not import)."""


@dataclass(frozen=True)
class _Found:
    origin: Origin
    dataplane: Dataplane | None
    reason: str | None


#: perfkit's own, as pyproject.toml registers them: found also where perfkit runs from a source tree
#: that was not installed (``PYTHONPATH``, a lab host's copy), which has no entry points.
BUILTIN = {"calib": "perfkit.dataplanes.calib:DATAPLANE", "l4lb": "perfkit.dataplanes.l4lb:DATAPLANE",
           "pgwu": "perfkit.dataplanes.pgwu:DATAPLANE"}


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    eps = list(importlib.metadata.entry_points(group=GROUP))
    have = {ep.name for ep in eps}
    eps += [importlib.metadata.EntryPoint(n, v, GROUP) for n, v in BUILTIN.items() if n not in have]
    return sorted(eps, key=lambda ep: ep.name)


def _last_line(err: BaseException) -> str:
    line = " ".join(traceback.format_exception_only(type(err), err)[-1].split())
    return line or type(err).__name__


def _resolve(ep: importlib.metadata.EntryPoint) -> tuple[Dataplane | None, str | None]:
    """The dataplane ``ep`` names, or (None, one line saying why it is not one)."""
    try:
        obj = ep.load()
    except Exception as err:  # noqa: BLE001 - any error of a plugin's import is that plugin's
        return None, f"does not import ({ep.value}): {_last_line(err)}"
    if isinstance(obj, type) and issubclass(obj, Dataplane):
        try:
            obj = obj()
        except Exception as err:  # noqa: BLE001
            return None, f"{ep.value}() fails: {_last_line(err)}"
    if not isinstance(obj, Dataplane):
        return None, f"{ep.value} is a {type(obj).__name__}, not a perfkit.dataplane.Dataplane instance or subclass"
    version = getattr(obj, "api_version", None)
    if version != API_VERSION:
        return None, (f"written for dataplane API version {version!r}; this perfkit has version {API_VERSION} "
                      "(docs/dataplane-api.md)")
    if obj.name != ep.name:
        return None, f"{ep.value}.name is {obj.name!r}, not its entry point's name {ep.name!r}"
    return obj, None


def _origin(ep: importlib.metadata.EntryPoint, dp: Dataplane | None) -> Origin:
    dist = getattr(ep, "dist", None)
    file = None
    if dp is not None:
        module = importlib.import_module(type(dp).__module__)
        file = getattr(module, "__file__", None)
    return Origin(ep.name, ep.value, dist.metadata["Name"] if dist else None, dist.version if dist else None, file)


@lru_cache(maxsize=None)
def _registered() -> dict[str, tuple[importlib.metadata.EntryPoint, ...]]:
    """The entry points of every registered name, by name (sorted); nothing imported."""
    out: dict[str, tuple[importlib.metadata.EntryPoint, ...]] = {}
    for ep in _entry_points():
        out[ep.name] = out.get(ep.name, ()) + (ep,)
    return out


@lru_cache(maxsize=None)
def _find(name: str) -> _Found | None:
    """The dataplane registered as ``name``, imported now (only it); None if no such name."""
    eps = _registered().get(name)
    if not eps:
        return None
    dp, reason = _resolve(eps[0])
    found = _Found(_origin(eps[0], dp), dp, reason)
    for ep in eps[1:]:   # the same name registered twice (two packages, or a stale install)
        if ep.value != found.origin.value:
            found = _Found(found.origin, None, f"registered twice: {found.origin.value} and {ep.value}")
    return found


def _found() -> dict[str, _Found]:
    """Every registered dataplane, each imported (once)."""
    return {n: f for n in _registered() if (f := _find(n)) is not None}


def registered() -> tuple[str, ...]:
    """Every registered dataplane's name (its entry point's, perfkit's own included), sorted, without
    importing any: one may still not load (``names()`` has those that do)."""
    return tuple(_registered())


def names() -> tuple[str, ...]:
    """Every installed dataplane that loads, sorted."""
    return tuple(n for n, f in _found().items() if f.dataplane is not None)


def broken() -> dict[str, str]:
    """Installed dataplanes that do not load: name -> one line saying why."""
    return {n: f.reason for n, f in _found().items() if f.reason is not None}


def origins() -> dict[str, Origin]:
    """Where every registered dataplane (loading or broken) comes from, by name."""
    return {n: f.origin for n, f in _found().items()}


def is_path(name: str) -> bool:
    """Whether a ``--dataplane`` value is a description file's path rather than a registry name."""
    return str(name).lower().endswith((".yaml", ".yml")) or "/" in str(name)


@lru_cache(maxsize=None)
def _described(path: Path) -> Dataplane:
    from perfkit import describe
    return describe.load(path)


def get(name: str) -> Dataplane:
    """The dataplane called ``name``, or described by the file at that path (``perfkit.describe``:
    a path ending in .yaml/.yml or holding a ``/``); ConfigError lists the known ones and says why a
    broken one does not load."""
    if is_path(name):
        return _described(Path(name).expanduser().resolve())
    found = _find(name)
    if found is None:
        raise ConfigError("dataplane", name, names())
    if found.dataplane is None:
        raise ConfigError("dataplane", name, f"{', '.join(names())} ({name} {found.reason})")
    return found.dataplane


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


def refresh() -> None:
    """Find the installed dataplanes again (after a package was installed or removed)."""
    _registered.cache_clear()
    _find.cache_clear()
    _described.cache_clear()
    encapsulations.cache_clear()
