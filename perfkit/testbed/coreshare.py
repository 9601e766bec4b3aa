"""Who ran on the DUT cores during a trial: the DUT's packet threads, perfkit, others, or no one.

``bpf/coreshare.bpf.c`` charges every interval between two context switches on a CPU to the task
that ran in it (exact to the switch; interrupts count for the task they interrupted). The classes:
``packet`` (the DUT's packet threads: threaded NAPI, cpumap kthreads), ``perfkit`` (perfkit's own
processes, ``perfkit.host.housekeeping.own_pids``), ``other`` (every other process and kernel thread)
and ``idle``. A trial then says how much of its DUT cores went to work that is not the DUT's
(``TrialResult.dut_core_time``, ``dut_perfkit_share``, ``dut_others_share``): a DUT figure taken
while something else held its core a third of the time is not the DUT's capacity.

How it compares with ``dut_busy`` (the packet threads' own CPU time, ``/proc/<tid>/schedstat``):
equal where they run most of the time (median ratio 0.999 over 44 trials at ``dut_busy`` >= 0.8 in
``make run`` on the 2-vCPU VM), ``packet`` up to ~10 % lower where they wake thousands of times a
second (median 0.90 below 0.5): a few microseconds per wake-up that schedstat gives the thread
count as ``idle`` here (why, not pinned down: the switch is timed at the tracepoint, schedstat at
the scheduler's clock update). ``perfkit`` and ``other`` are
intervals of other tasks, exact to the switch; ``dut_busy`` stays the measure of the DUT's load.

``CoreShare(packet_tids)`` attaches the program; ``set_perfkit(pids)`` says which processes are
perfkit's (refreshed before each trial: servers and threads come and go); ``mark()`` and
``since(mark)`` give a window's shares per CPU.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Iterable

from perfkit.layouts import CoreClass, core_share
from perfkit.libbpf import BpfObject
from perfkit.testbed.bpfbuild import object_path

PROGRAM = "coreshare"
#: The classes, as named in ``TrialResult.dut_core_time``.
CLASSES: dict[CoreClass, str] = {CoreClass.CORE_PACKET: "packet", CoreClass.CORE_PERFKIT: "perfkit",
                                 CoreClass.CORE_OTHER: "other", CoreClass.CORE_IDLE: "idle"}


@dataclass(frozen=True)
class Mark:
    """Cumulative time per CPU and class [ns] at ``t_ns`` (``time.monotonic_ns``)."""

    t_ns: int
    ns: dict[int, dict[str, int]]


class CoreShare:
    """The core-share program attached (close it, or use ``with``)."""

    def __init__(self, packet_tids: Iterable[int]):
        self.obj = BpfObject(object_path(PROGRAM))
        try:
            self._share = self.obj.map("core_share")
            self._packet = self.obj.map("packet_tids")
            self._perfkit = self.obj.map("perfkit_tgids")
            for tid in packet_tids:
                self._packet.update(ctypes.c_uint32(tid), ctypes.c_uint8(1))
            self.obj.attach("core_switch")
        except BaseException:
            self.obj.close()
            raise

    def set_perfkit(self, pids: Iterable[int]) -> None:
        """perfkit's own processes (tgids) from now on."""
        want = {int(p) for p in pids}
        have = {int.from_bytes(k, "little") for k in self._perfkit.keys()}
        for pid in have - want:
            self._perfkit.delete(ctypes.c_uint32(pid))
        for pid in want - have:
            self._perfkit.update(ctypes.c_uint32(pid), ctypes.c_uint8(1))

    def _read(self) -> Mark:
        raw = self._share.lookup(ctypes.c_uint32(0))
        now = time.monotonic_ns()  # the same clock as bpf_ktime_get_ns
        out: dict[int, dict[str, int]] = {}
        for cpu, value in enumerate(self._share.percpu_values(raw) if raw else []):
            s = core_share.from_buffer_copy(value[:ctypes.sizeof(core_share)])
            ns = {name: int(s.ns[cls]) for cls, name in CLASSES.items()}
            if s.since_ns and now > s.since_ns and s.running in CLASSES:
                ns[CLASSES[CoreClass(s.running)]] += now - s.since_ns  # the task running now, so far
            out[cpu] = ns
        return Mark(now, out)

    def mark(self) -> Mark:
        return self._read()

    def since(self, mark: Mark, cpus: Iterable[int]) -> dict[int, dict[str, float]]:
        """Per CPU of ``cpus``, the share of the window since ``mark`` [0..1] each class ran."""
        end = self._read()
        window = end.t_ns - mark.t_ns
        out = {}
        for cpu in cpus:
            a, b = mark.ns.get(cpu), end.ns.get(cpu)
            if a is None or b is None or window <= 0:
                continue
            out[cpu] = {name: max(0.0, (b[name] - a[name]) / window) for name in CLASSES.values()}
        return out

    def close(self) -> None:
        self.obj.close()

    def __enter__(self) -> CoreShare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def trial_fields(shares: dict[int, dict[str, float]]) -> dict[str, object]:
    """``TrialResult``'s core-share fields from ``CoreShare.since`` over the DUT cores."""
    if not shares:
        return {}
    n = len(shares)
    return {"dut_core_time": {str(c): {k: round(v, 6) for k, v in s.items()} for c, s in sorted(shares.items())},
            "dut_perfkit_share": sum(s["perfkit"] for s in shares.values()) / n,
            "dut_others_share": sum(s["other"] for s in shares.values()) / n}
