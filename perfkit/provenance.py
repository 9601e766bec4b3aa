"""Where a measurement's code came from: the hash of each BPF object loaded, and each dataplane's source.

- ``file_sha256(path)``: the sha256 (hex) of a file, cached by (path, inode, mtime, size), so that
  every object loaded is read once however often it is loaded (``perfkit.libbpf.BpfObject`` hashes
  what it opens; a trial records the hashes of the objects its DUT loaded: field ``objects``,
  from ``DutProgram.object_hashes``, whose ``object_hashes(objects)`` names them by path).
- ``dataplane_source(name)``: where a dataplane comes from, for a run's metadata (``dataplanes``):
  the distribution that provides its module (``name==version``), or the description file it was
  read from (its path and sha256, its build command, and the sha256 of the object it builds with
  its default build options); and, when that file or module lies in a git repository, the
  repository, its commit and whether tracked files differ from it (``git_source``). perfkit's own
  version and commit are the run's ``perfkit`` (``perfkit.version``).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable

from perfkit.errors import PerfkitError
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


def _file_lists(dist: importlib.metadata.Distribution) -> str:
    """The texts ``Distribution.files`` reads its list from (RECORD, else installed-files.txt, else
    SOURCES.txt), joined."""
    return "\n".join(dist.read_text(name) or "" for name in ("RECORD", "installed-files.txt", "SOURCES.txt"))


@functools.lru_cache(maxsize=None)
def _distributions(top: str) -> tuple[str, ...]:
    """``importlib.metadata.packages_distributions().get(top, [])``, without making a path object of
    every file of every distribution installed (0.1-0.3 s per run): a distribution that declares its
    top-level names (top_level.txt) is taken at its word, as there; one that does not is inferred
    from its files, as there, only when their list mentions ``top`` at all (it cannot provide it
    otherwise)."""
    # packages_distributions' own two rules (private: a Python without them gets the whole mapping)
    declared_of = getattr(importlib.metadata, "_top_level_declared", None)
    inferred_of = getattr(importlib.metadata, "_top_level_inferred", None)
    if declared_of is None or inferred_of is None:
        return tuple(importlib.metadata.packages_distributions().get(top, []))
    found = []
    for dist in importlib.metadata.distributions():
        declared = declared_of(dist)
        provides = top in declared if declared else top in _file_lists(dist) and top in inferred_of(dist)
        if provides:
            found.append(dist.metadata["Name"])
    return tuple(found)


def distribution_of(module: str) -> str:
    """``name==version`` of the installed distribution providing the top-level package of
    ``module`` (``perfkit==0.1.0``), or "" when none does (a source tree on ``sys.path``)."""
    top = module.split(".", 1)[0]
    for dist in _distributions(top):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _git(directory: Path, *args: str) -> str | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}   # git bisect run's GIT_DIR
    try:
        out = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_source(path: Path) -> dict[str, Any]:
    """The git repository holding ``path`` (a file or directory): ``repository`` (its top),
    ``commit`` (HEAD, full), ``dirty`` (tracked files differ from it) and ``path`` (``path``
    relative to the top); {} when it lies in none."""
    directory = path if path.is_dir() else path.parent
    top = _git(directory, "rev-parse", "--show-toplevel")
    commit = _git(directory, "rev-parse", "HEAD") if top else None
    if not top or not commit:
        return {}
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(top))
    return {"repository": top, "commit": commit, "dirty": bool(status) if status is not None else None, "path": rel}


@functools.lru_cache(maxsize=64)
def source_facts(name: str) -> dict[str, Any]:
    """Where dataplane ``name``'s code came from, for each trial (its field ``dataplane_source``):
    ``git_source`` of a description file (repository, commit, dirty, path), or of a plugin's
    module with its ``package``; {} for perfkit's own (the run's ``perfkit`` has its commit) and a
    name that does not load. Taken once per process and name: a run's trials share it."""
    from perfkit import dataplanes

    if name.endswith((".yaml", ".yml")) or "/" in name:
        return git_source(Path(name).resolve())
    try:
        module = type(dataplanes.get(name)).__module__
    except PerfkitError:
        return {}
    if module.split(".", 1)[0] == __name__.split(".", 1)[0]:
        return {}
    spec = importlib.util.find_spec(module.split(".", 1)[0])
    where = Path(spec.origin).parent if spec is not None and spec.origin else None
    return {"package": distribution_of(module), **(git_source(where) if where else {})}


def dataplane_source(name: str) -> dict[str, Any]:
    """Where dataplane ``name`` (a registry name or a description file's path) comes from (module
    doc): a description file's ``file``, ``sha256``, ``build`` (its command, "" for none),
    ``object`` and ``object_sha256`` (the object of the default build options; "" when it has none
    or it does not build: the run's trials say why); a package's ``module``, ``package``
    (``<distribution>==<version>``, "" when no installed distribution provides it) and, for a plugin, its
    module's ``file``; either's
    ``git_source`` facts when it lies in a git repository."""
    from perfkit import dataplanes
    from perfkit.describe import build

    if name.endswith((".yaml", ".yml")) or "/" in name:
        p = Path(name).resolve()
        if not p.is_file():
            return {"file": str(p), "sha256": ""}
        out: dict[str, Any] = {"file": str(p), "sha256": file_sha256(p), **git_source(p)}
        try:
            desc = getattr(dataplanes.get(str(p)), "desc", None)
        except PerfkitError:   # the run refuses it in its own words
            desc = None
        out["build"] = desc.program.build if desc is not None else ""
        out["object"], out["object_sha256"] = "", ""
        if desc is not None and desc.program.object is not None:
            try:
                obj = build.object_path(desc, {})
            except PerfkitError:
                obj = None
            if obj is not None and obj.is_file():
                out["object"], out["object_sha256"] = shown(obj), file_sha256(obj)
        return out
    module = type(dataplanes.get(name)).__module__
    spec = importlib.util.find_spec(module.split(".", 1)[0])
    where = Path(spec.origin).parent if spec is not None and spec.origin else None
    own = module.split(".", 1)[0] == __name__.split(".", 1)[0]   # perfkit's own: the run's ``perfkit`` says it
    if own:
        return {"module": module, "package": distribution_of(module)}
    file = getattr(importlib.import_module(module), "__file__", None) or ""
    return {"module": module, "package": distribution_of(module), "file": file, **(git_source(where) if where else {})}
