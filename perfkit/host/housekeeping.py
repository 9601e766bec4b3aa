"""Where perfkit's own work runs: never on a DUT core.

A figure is the DUT's only if the DUT's cores ran the DUT. perfkit's own processes -- its CLI, the
notebook kernel that runs a campaign, the metrics servers it starts, ``perf record`` -- would
otherwise run wherever the scheduler puts them; measured on the 2-vCPU VM, the Pushgateway alone
took a median 29 % of the DUT core's perf samples in ``make run``'s max-rate trials.

``own_pids()`` -- perfkit's own processes:

- this process;
- the perfkit processes above it (a notebook kernel's ``perfkit experiment``), up to the first
  process that is not perfkit's (``make``, a shell, pytest);
- every process below those (servers a run started, ``perf``, Chromium, the kernel);
- the servers of every local metrics stack perfkit started (``perfkit.metrics.stackstate.server_pids``),
  whichever process started them.

``Confinement(dut_cpus)`` takes every thread of those processes off ``dut_cpus``: each thread's
CPU set loses the DUT cores (a thread pinned to tester cores keeps its pin; one allowed only DUT
cores gets every other CPU). ``refresh()`` does it again for processes and threads that appeared
since (the testbed calls it before every trial); ``release()`` gives each thread it moved its CPU
set back, unless someone changed it since. When the DUT takes every CPU (``--dut-cores`` = nproc)
there is nowhere to go, and nothing is moved: the trials' ``dut_perfkit_share`` says what perfkit
took then. Unlike the shield (``perfkit.testbed.shield``) this moves nothing that belongs to anyone
else, so it is always on.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from perfkit.host.cpus import online_cpus
from perfkit.metrics.stackstate import server_pids

_PROC = Path("/proc")


def _stat_fields(pid: int | str, tid: int | str | None = None) -> list[str] | None:
    """Fields of ``/proc/<pid>[/task/<tid>]/stat`` after the command name (state is [0])."""
    path = _PROC / str(pid) / ("stat" if tid is None else f"task/{tid}/stat")
    try:
        text = path.read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process now."""
    out = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (f := _stat_fields(entry.name)) is not None:
            out[int(entry.name)] = int(f[1])
    return out


def _is_perfkit(pid: int) -> bool:
    """Whether ``pid`` runs the perfkit command (``perfkit ...``, ``python -m perfkit ...``)."""
    try:
        argv = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[:4]
    except OSError:
        return False
    names = [os.path.basename(a.decode(errors="replace")) for a in argv]
    return "perfkit" in names[:2] or any(a == "-m" and b == "perfkit" for a, b in zip(names, names[1:]))


def own_pids() -> set[int]:
    """perfkit's own processes (module doc)."""
    ppids = _ppids()
    roots = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and _is_perfkit(pid):
        roots.add(pid)
        pid = ppids.get(pid, 0)
    children: dict[int, list[int]] = {}
    for child, parent in ppids.items():
        children.setdefault(parent, []).append(child)
    own, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p not in own:
            own.add(p)
            todo.extend(children.get(p, ()))
    return own | (server_pids() & set(ppids))


def _tids(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in (_PROC / str(pid) / "task").iterdir()]
    except OSError:
        return []


def _start_ticks(pid: int, tid: int) -> int | None:
    f = _stat_fields(pid, tid)
    return int(f[19]) if f and len(f) > 19 else None


class Confinement:
    """perfkit's own threads kept off ``dut_cpus`` (module doc)."""

    def __init__(self, dut_cpus: Iterable[int]):
        self.dut_cpus = frozenset(dut_cpus)
        self.elsewhere = frozenset(online_cpus()) - self.dut_cpus
        self.pids: set[int] = set()
        """perfkit's own processes at the last ``refresh``."""
        self._moved: dict[int, tuple[int | None, frozenset[int], frozenset[int]]] = {}
        """tid -> (its start time, its CPU set before, the one given)."""
        self.refresh()

    def refresh(self) -> set[int]:
        """Move the threads of perfkit's processes off the DUT cores; returns those processes."""
        self.pids = own_pids()
        if not self.elsewhere:
            return self.pids
        for pid in self.pids:
            for tid in _tids(pid):
                self._confine(pid, tid)
        return self.pids

    def _confine(self, pid: int, tid: int) -> None:
        try:
            before = frozenset(os.sched_getaffinity(tid))
        except OSError:
            return  # gone
        if not before & self.dut_cpus:
            return
        given = (before - self.dut_cpus) or self.elsewhere
        try:
            os.sched_setaffinity(tid, given)
        except OSError:
            return  # gone, or a kernel thread perfkit may not move
        if tid not in self._moved:
            self._moved[tid] = (_start_ticks(pid, tid), before, frozenset(given))

    def release(self) -> None:
        """Give every thread moved its CPU set back (unless it changed since, or the thread is gone)."""
        moved, self._moved = self._moved, {}
        for tid, (start, before, given) in moved.items():
            try:
                if _start_ticks(tid, tid) != start and start is not None:
                    continue  # not the same thread (the tid was reused)
                if frozenset(os.sched_getaffinity(tid)) == given:
                    os.sched_setaffinity(tid, before)
            except OSError:
                continue
