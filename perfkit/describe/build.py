"""The object of a description: as given, or built by its ``program.build`` command and cached.

A build runs ``sh -c BUILD`` in the description's directory with the build options as ``-D``
words: substituted for ``{defines}`` and in ``$DEFINES``. ``{output}`` in the command is the cache
path the object should be written to; without it the build writes ``program.object`` and perfkit
copies it into the cache. The cache (``<cache>/objects/<key>/``, ``perfkit.paths.cache_dir``) is keyed
by the hash of the source tree (``program.sources``, else the description's directory: every file
but hidden ones, objects, ``build/`` and the description itself), the command and the build options, so a changed source is rebuilt and
an unchanged one is not.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Mapping

from perfkit.describe.schema import Description
from perfkit.errors import ConfigError
from perfkit.paths import cache_dir

#: Lines of a failed build's output its refusal quotes.
TAIL_LINES = 4
_SKIP_DIRS = {"__pycache__", "node_modules", "build"}


def defines(desc: Description, params: Mapping[str, Any]) -> list[str]:
    """The build options of ``params`` as ``-DMACRO=value`` words (booleans as 1/0)."""
    out = []
    for macro, p in desc.program.defines:
        value = params.get(p.name, p.default)
        out.append(f"-D{macro}={int(value) if isinstance(value, bool) else value}")
    return out


def object_path(desc: Description, params: Mapping[str, Any]) -> Path:
    """The object to load for ``params``: ``program.object``, or the cached build."""
    assert desc.program.object is not None, "a description without an object loads none"
    if not desc.program.build:
        return desc.program.object
    words = defines(desc, params)
    key = cache_key(desc, words)
    out = cache_dir() / "objects" / key / desc.program.object.name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    cmd = desc.program.build.replace("{defines}", " ".join(words)).replace("{output}", str(tmp))
    proc = subprocess.run(["sh", "-c", cmd], cwd=desc.dir, capture_output=True, text=True,
                          env={**os.environ, "DEFINES": " ".join(words)})
    where = f"{desc.path.name}: program.build"
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-TAIL_LINES:])
        raise ConfigError(where, cmd, f"a command that makes {desc.program.object.name}; it failed with exit "
                          f"status {proc.returncode}: {tail or '(no output)'}")
    if "{output}" not in desc.program.build:
        if not desc.program.object.is_file():
            raise ConfigError(where, cmd, f"a command that makes {desc.program.object} (it made no such file)")
        shutil.copyfile(desc.program.object, tmp)
    elif not tmp.is_file():
        raise ConfigError(where, cmd, "a command that writes the object to {output} (it wrote nothing there)")
    os.replace(tmp, out)
    return out


def cache_key(desc: Description, words: list[str]) -> str:
    """sha256 (first 24 hex digits) of the source tree, the build command and its options."""
    h = hashlib.sha256()
    h.update(desc.program.build.encode() + b"\0" + " ".join(words).encode() + b"\0")
    for path in source_files(desc):
        h.update(str(path.relative_to(desc.dir) if path.is_relative_to(desc.dir) else path).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:24]


def source_files(desc: Description) -> list[Path]:
    """The files the cache key covers, sorted."""
    roots = desc.program.sources or (desc.dir,)
    out: set[Path] = set()
    for root in roots:
        if root.is_file():
            out.add(root)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
            for f in filenames:
                p = Path(dirpath) / f
                if not f.startswith(".") and p.suffix != ".o" and p not in (desc.program.object, desc.path):
                    out.add(p)
    return sorted(out)
