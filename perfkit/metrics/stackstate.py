"""What perfkit records about a local metrics stack: ``state.json`` in its directory (the servers'
pids, start times, ports, command lines, and the stack's owners), the directory's lock, and the
registry of stack directories under ``$PERFKIT_STATE_DIR/stacks/`` that ``perfkit clean`` and
``perfkit.host.housekeeping`` read."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from perfkit import owners as _owners
from perfkit.errors import MetricsError
from perfkit.metrics.config import STACK_ENDPOINTS_FILE
from perfkit.metrics.servers import is_ours


def state_path(d: Path) -> Path:
    """The state file of the stack in ``d``."""
    return d / "state.json"


def read_state(d: Path) -> dict[str, Any]:
    """The recorded state of the stack in ``d`` (empty: none); ``MetricsError`` if it is corrupt."""
    p = state_path(d)
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise MetricsError(f"stack state {p} is corrupt ({err}); remove it after checking "
                           "`pgrep -a prometheus` for servers to stop by hand") from None


def write_state(d: Path, state: Mapping[str, Any]) -> None:
    """Replace the state of the stack in ``d`` (atomic, fsynced)."""
    tmp = state_path(d).with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(state, indent=2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_path(d))


def _registry_file(d: Path) -> Path:
    return _owners.STATE_DIR / "stacks" / (hashlib.sha1(str(d).encode()).hexdigest()[:16] + ".json")


def register(d: Path) -> None:
    """List ``d`` among the stack directories (``registered_dirs``)."""
    f = _registry_file(d)
    if not f.exists():
        with contextlib.suppress(OSError):
            _owners.write_json(f, {"dir": str(d)})


def forget(d: Path) -> None:
    """The stack in ``d`` has no state any more: remove its state files and its registry entry."""
    state_path(d).unlink(missing_ok=True)
    (d / STACK_ENDPOINTS_FILE).unlink(missing_ok=True)
    _registry_file(d).unlink(missing_ok=True)


def registered_dirs() -> list[Path]:
    """Stack directories with a state (``up`` registers them; a directory removed since is skipped)."""
    out = []
    reg = _owners.STATE_DIR / "stacks"
    for f in sorted(reg.glob("*.json")) if reg.is_dir() else []:
        rec = _owners.read_json(f)
        d = Path(rec["dir"]) if rec and isinstance(rec.get("dir"), str) else None
        if d is not None and state_path(d).exists():
            out.append(d)
        else:
            f.unlink(missing_ok=True)
    return out


def server_pids() -> set[int]:
    """The pids of the running servers of every registered stack (``perfkit.host.housekeeping`` keeps
    them off the DUT cores: perfkit started them, whichever process that was)."""
    pids = set()
    for d in registered_dirs():
        try:
            state = read_state(d)
        except MetricsError:
            continue
        pids |= {int(rec["pid"]) for rec in state.get("components", {}).values() if is_ours(rec)}
    return pids


def adopt(d: Path, state: dict[str, Any], owner: Mapping[str, Any] | None, started: Sequence[str]) -> None:
    """Record the owner in the state: ``owner`` (a run; the components started for it are stopped by
    ``release``, and the directory is registered for ``perfkit clean``), else this process."""
    me = dict(owner) if owner is not None else _owners.me()
    live = [o for o in state.get("owners", []) if _owners.alive(o) and not _owners.same(o, me)]
    state["owners"] = live + [me]
    if owner is not None:
        state["auto_started"] = sorted(set(state.get("auto_started", [])) | set(started))
        register(d)
    write_state(d, state)


@contextlib.contextmanager
def locked(d: Path, wait: float = 0.0) -> Iterator[None]:
    """The stack directory's lock; ``wait``: seconds to wait for it before giving up."""
    d.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    with open(d / ".lock", "w") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MetricsError(f"another perfkit stack command is working on {d}; try again") from None
                time.sleep(0.1)
        yield
