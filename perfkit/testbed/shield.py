"""Shielding the DUT cores: every other task that may run elsewhere is moved off them while a
testbed measures (the idea of ``cset shield`` and of isolated cores, without a reboot).

Why: on a VM, guest tasks that may run on any CPU -- the VM's agent, RCU's kthreads, kdamond --
took the DUT core for 8-64 ms at a time here, and the DUT's packet thread waited behind them
(``perfkit.host.stallprobe`` counts those waits). Such a wait overflows a NIC-sized queue at a few hundred
kpps, and it decided NDR: ``bench/ndr_repeatability.py`` (handling on) gave a CV of 5.5 % with the
waits, 2.2 % with this shield and 1.6 % with every other task moved by hand, the same evening.

What moves: every thread whose CPU affinity includes a DUT core and some other CPU; its affinity
loses the DUT cores. Threads bound to the DUT cores alone (per-CPU kthreads, the DUT's own packet
threads) and this process's threads stay. Threads started later mostly inherit an affinity without
the DUT cores; those that do not are moved by ``refresh()``, which the generator calls before every
trial.

Nothing is lost: the record of what moved, with each thread's start time, is on disk
(``$PERFKIT_STATE_DIR/shields/<testbed_id>.json``, fsynced) before anything moves. ``close()``
gives each thread that still runs its affinity back; ``perfkit clean`` does it for a shield whose
owner is gone (``clean``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from perfkit import owners


def record_path(testbed_id: str) -> Path:
    return owners.STATE_DIR / "shields" / f"{testbed_id}.json"


@dataclass
class Shield:
    """The DUT cores of one testbed, shielded until ``close()`` (a context manager)."""

    testbed_id: str
    cores: frozenset[int]
    moved: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    """Thread id -> (its start time [clock ticks after boot], its CPUs before)."""
    refused: set[tuple[int, int]] = field(default_factory=set)
    """(thread id, start time) of threads that would not move: not tried again."""

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> int:
        """Move the threads that may run on the DUT cores since the last call: new ones (a process
        started after the shield, a new worker thread of an old one: inherited affinity keeps most of
        them off, not all), and moved ones that asked for them again (their CPUs before the shield
        stay on record). The generator calls it before every trial; it costs a walk of ``/proc`` (a
        few ms). Returns how many moved."""
        mine = _threads_of(os.getpid())
        plan: dict[int, tuple[int, list[int]]] = {}
        again: list[int] = []
        for tid in _all_threads():
            cpus = _affinity(tid)
            if tid in mine or cpus is None or not cpus & self.cores or cpus <= self.cores:
                continue
            start = owners.proc_start(tid)
            if start is None or (tid, start) in self.refused or _kernel_keeps_affinity(tid):
                continue
            if self.moved.get(tid, (None,))[0] == start:
                again.append(tid)
            else:
                plan[tid] = (start, sorted(cpus))
        if plan:
            owners.write_json(record_path(self.testbed_id), self._record({**self.moved, **plan}))
        moved = 0
        for tid, (start, cpus) in plan.items():
            if _move_off(tid, set(cpus) - self.cores):
                self.moved[tid] = (start, cpus)
                moved += 1
            else:  # gone, or it will not move: nothing to give back
                self.refused.add((tid, start))
        for tid in again:
            moved += _move_off(tid, set(self.moved[tid][1]) - self.cores)
        return moved

    def _record(self, moved: dict[int, tuple[int, list[int]]]) -> dict:
        return {"owner": owners.me(), "cores": sorted(self.cores),
                "moved": [{"tid": t, "start_ticks": s, "cpus": c} for t, (s, c) in moved.items()]}

    def close(self) -> None:
        """Give every moved thread that still runs its CPUs back, and forget the record (idempotent)."""
        restore(self.moved)
        self.moved = {}
        record_path(self.testbed_id).unlink(missing_ok=True)

    def __enter__(self) -> Shield:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def restore(moved: dict[int, tuple[int, list[int]]]) -> int:
    """Give each thread its CPUs back, if it is the same thread (start time checked). Returns how many."""
    return sum(_move_off(tid, set(cpus)) for tid, (start, cpus) in moved.items()
               if owners.proc_start(tid) == start)


def clean(testbed_id: str) -> list[str]:
    """``perfkit clean``: restore what the shield of ``testbed_id`` moved (its owner is gone)."""
    path = record_path(testbed_id)
    rec = owners.read_json(path)
    if rec is None:
        path.unlink(missing_ok=True)
        return []
    moved = {int(m["tid"]): (int(m["start_ticks"]), [int(c) for c in m["cpus"]]) for m in rec.get("moved", [])}
    n = restore(moved)
    path.unlink(missing_ok=True)
    return [f"shield {testbed_id} (CPUs {','.join(map(str, rec.get('cores', [])))}): {n} threads given their CPUs back"]


#: ``PF_NO_SETAFFINITY`` (include/linux/sched.h): the kernel refuses to move the thread (unbound
#: kworkers, which may run anywhere).
PF_NO_SETAFFINITY = 0x04000000


def _kernel_keeps_affinity(tid: int) -> bool:
    fields = owners.stat_fields(tid)  # [6]: flags
    return fields is not None and bool(int(fields[6]) & PF_NO_SETAFFINITY)


def _move_off(tid: int, cpus: set[int]) -> bool:
    """Give the thread ``cpus`` (off the DUT cores, or back); False when it is gone or will not move."""
    try:
        os.sched_setaffinity(tid, cpus)
        return True
    except OSError:
        return False


def _all_threads() -> Iterator[int]:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            yield from _threads_of(int(pid))


def _threads_of(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


def _affinity(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except OSError:
        return None


def records() -> Iterable[str]:
    """Testbed ids that have a shield record."""
    d = owners.STATE_DIR / "shields"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
