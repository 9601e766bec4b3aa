"""Who owns a testbed or a metrics stack: a process (pid and start time) and the run it works for.

``perfkit clean`` removes only what no live process owns (or, with ``--run RUN_ID``, what that run
owns), so a ``make test`` beside a ``make run`` does not destroy the run's testbed, and a run killed
by SIGKILL leaves nothing that a later ``perfkit clean`` cannot find.

An owner record is ``{"pid", "start_ticks", "run_id", "command"}``; it is *alive* while a process
with that pid and that start time (``/proc/<pid>/stat``, so a recycled pid never counts) exists and
is not a zombie. Records of testbeds live in ``$PERFKIT_STATE_DIR/testbeds/<testbed_id>.json``
(default ``/run/perfkit``); the metrics stack keeps its owners in its ``state.json``.

``set_run(run_id)``: the campaign runner names the run this process works for; everything set up
afterwards records it.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

STATE_DIR = Path(os.environ.get("PERFKIT_STATE_DIR", "/run/perfkit"))

_run_id: str | None = None


def set_run(run_id: str | None) -> None:
    """The run this process works for (None: none)."""
    global _run_id
    _run_id = run_id


def current_run() -> str | None:
    return _run_id


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from its third field (state) on: ``[2]`` of proc(5) is ``[0]`` here; None
    if there is no such process or thread."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    return text[text.rfind(")") + 2:].split()


def proc_start(pid: int) -> int | None:
    """Start time [clock ticks after boot] of a live, non-zombie process; None if there is none."""
    rest = stat_fields(pid)
    if rest is None or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def me() -> dict[str, Any]:
    """An owner record for this process (and the run it works for)."""
    pid = os.getpid()
    return {"pid": pid, "start_ticks": proc_start(pid), "run_id": _run_id,
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:4]))}


def alive(owner: Mapping[str, Any] | None) -> bool:
    """The owner's process still runs (same pid and start time)."""
    if not owner or not owner.get("pid") or owner.get("start_ticks") is None:
        return False
    return proc_start(int(owner["pid"])) == owner["start_ticks"]


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    return bool(a and b) and a.get("pid") == b.get("pid") and a.get("start_ticks") == b.get("start_ticks")


def describe(owner: Mapping[str, Any] | None) -> str:
    if not owner:
        return "no owner"
    run = f", run {owner['run_id']}" if owner.get("run_id") else ""
    return f"pid {owner.get('pid')} ({owner.get('command') or '?'}{run})"


def netns_id() -> int:
    """The inode of this process's network namespace: a record's interfaces are this namespace's,
    or a namespace's within it (a lab host's agent in a sandbox shares the state directory)."""
    return os.stat("/proc/self/ns/net").st_ino


def netns_alive(inode: int) -> bool:
    """Whether a network namespace with this inode still exists: a process or a name holds it."""
    holders = [Path("/run/netns").glob("*")] + [(d / "ns" / "net" for d in Path("/proc").iterdir() if d.name.isdigit())]
    for paths in holders:
        for path in paths:
            try:
                if os.stat(path).st_ino == inode:
                    return True
            except OSError:
                continue
    return False


def elsewhere(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` (with a ``netns``) belongs to another network namespace that still
    exists: a clean there handles it. A record of a namespace that is gone is nobody's: its
    interfaces, programs and settings went with the namespace."""
    ns = record.get("netns")
    return ns is not None and int(ns) != netns_id() and netns_alive(int(ns))


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write a small record atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A record, or None if it is missing or unreadable (a torn record owns nothing)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
