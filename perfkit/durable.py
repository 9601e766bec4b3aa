"""Files that survive a crash: atomic replacement, durable appends of JSON lines, tolerant reads.

- ``atomic_write(path, data)``: a temporary file beside it (``.<name>.tmp``), written, fsynced,
  renamed over ``path``, and the directory fsynced: after a crash ``path`` holds the old or the new
  content, never a mix, and the rename itself is on disk.
- ``append_line(path, line)``: one line appended and fsynced; if the file's last line is torn (a
  process died while writing it) the new line starts on a fresh line instead of continuing it.
- ``read_lines(path)``: the JSON objects of a ``.jsonl`` file and the numbers of the torn lines,
  which are skipped.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from perfkit.crashpoints import crashpoint


def fsync_dir(path: Path) -> None:
    """fsync a directory (makes a rename or a new file in it durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    """The temporary file ``atomic_write`` uses for ``path``."""
    return path.with_name(f".{path.name}.tmp")


def _write_synced(fd: int, data: bytes, point: str) -> None:
    """Write ``data`` in two halves with the crash point ``point`` between them, then fsync."""
    half = len(data) // 2
    _write_all(fd, data[:half])
    crashpoint(point)
    _write_all(fd, data[half:])
    os.fsync(fd)


def atomic_write(path: Path, data: bytes, point: str = "store.atomic") -> None:
    """Replace ``path`` with ``data`` atomically and durably (see module doc).

    ``point`` names the crash point (``perfkit.crashpoints``) between the two halves of the data.
    """
    tmp = tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_synced(fd, data, point)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def append_line(path: Path, line: bytes, point: str = "append") -> None:
    """Append one newline-terminated line to ``path`` and fsync it.

    If the file does not end with a newline (a process died while writing its last line), a newline
    is written first: the new line never continues the fragment. ``point`` names the crash point
    (``perfkit.crashpoints``) between the two halves of the line.
    """
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _write_synced(fd, line, point)
    finally:
        os.close(fd)
    _fsync_dir_once(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_SYNCED_DIRS: set[str] = set()


def _fsync_dir_once(path: Path) -> None:
    """fsync the directory entry of a file the first time it is appended to (its creation)."""
    key = str(path)
    if key in _SYNCED_DIRS:
        return
    fsync_dir(path.parent)
    _SYNCED_DIRS.add(key)


def read_lines(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """(the JSON objects of a .jsonl file, line numbers of the torn lines skipped)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    out: list[dict[str, Any]] = []
    torn: list[int] = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:          # JSONDecodeError, or bytes that are not UTF-8
            torn.append(i)
            continue
        if isinstance(obj, dict):
            out.append(obj)
        else:
            torn.append(i)
    return out, torn
