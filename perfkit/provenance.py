"""Where a measurement's code came from: the hash of each BPF object loaded, and each dataplane's source.

- ``file_sha256(path)``: the sha256 (hex) of a file, cached by (path, inode, mtime, size), so that
  every object loaded is read once however often it is loaded (``perfkit.libbpf.BpfObject`` hashes
  what it opens; a trial records the hashes of the objects its DUT loaded: field ``objects``,
  from ``DutProgram.object_hashes``, whose ``object_hashes(objects)`` names them by path).
- ``dataplane_source(name)``: where a dataplane comes from, for a run's metadata (``dataplanes``):
  the distribution that provides its module (``name==version``), or the description file it was
  read from (its path and sha256).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Any, Iterable

from perfkit.paths import shown

_CACHE: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of ``path``'s bytes; read again only when its inode, mtime or size changed."""
    p = os.path.abspath(os.fspath(path))
    st = os.stat(p)
    key = (p, st.st_ino, st.st_mtime_ns, st.st_size)
    digest = _CACHE.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = _CACHE[key] = h.hexdigest()
    return digest


def object_hashes(objects: Iterable[Any]) -> dict[str, str]:
    """``{path: sha256}`` of loaded objects (``perfkit.libbpf.BpfObject``: ``path`` and ``sha256``),
    each path as ``perfkit.paths.shown`` gives it (``build/bpf/calib.o`` inside the checkout)."""
    return {shown(Path(os.path.abspath(o.path))): o.sha256 for o in objects if o is not None}


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_of(module: str) -> str:
    """``name==version`` of the installed distribution providing the top-level package of
    ``module`` (``perfkit==0.1.0``), or "" when none does (a source tree on ``sys.path``)."""
    top = module.split(".", 1)[0]
    for dist in _distributions().get(top, []):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def dataplane_source(name: str) -> dict[str, Any]:
    """Where dataplane ``name`` (a registry name or a description file's path) comes from:
    ``{"file": <path>, "sha256": ...}`` for a description file, else ``{"module": <its module>,
    "package": "<distribution>==<version>"}`` ("" when no installed distribution provides it)."""
    from perfkit import dataplanes

    if name.endswith((".yaml", ".yml")) or "/" in name:
        p = Path(name).resolve()
        return {"file": str(p), "sha256": file_sha256(p) if p.is_file() else ""}
    module = type(dataplanes.get(name)).__module__
    return {"module": module, "package": distribution_of(module)}
