"""The kernel threads that carry packets (threaded NAPI, cpumap) and the NAPI mode of the perfkit
testbeds' interfaces: their CPUs and scheduling class."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from perfkit.host import cpustat
from perfkit.testbed import netns, topology

#: Kernel threads that carry packets: threaded NAPI and cpumap.
PACKET_THREADS = ("napi/*", "cpumap/*")

_POLICIES = {os.SCHED_OTHER: "OTHER", os.SCHED_FIFO: "FIFO", os.SCHED_RR: "RR",
             getattr(os, "SCHED_BATCH", 3): "BATCH", getattr(os, "SCHED_IDLE", 5): "IDLE", 6: "DEADLINE"}


@dataclass
class PacketThread:
    """A kernel thread that carries packets (threaded NAPI ``napi/<dev>-<id>``, ``cpumap/<cpu>/map:<id>``)."""

    pid: int
    name: str
    cpus: list[int]
    """CPUs it may run on (its affinity)."""
    policy: str
    """Scheduling class: OTHER, FIFO, RR, BATCH, IDLE or DEADLINE."""
    priority: int
    """Real-time priority (FIFO, RR; 0 otherwise)."""
    nice: int


@dataclass
class Interface:
    """A network interface of a perfkit testbed and how its receive processing (NAPI) runs."""

    ns: str
    dev: str
    threaded: bool | None
    """Threaded NAPI (a kernel thread per queue) or softirq (False: on the CPU that raised it); None: unknown."""
    napi_threads: list[int]
    """Pids of its NAPI threads (see ``HostCheck.packet_threads``)."""


def _policy(pid: int) -> tuple[str, int, int]:
    """(scheduling class, real-time priority, nice) of a thread."""
    policy = os.sched_getscheduler(pid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0x40000000)
    return (_POLICIES.get(policy, str(policy)), os.sched_getparam(pid).sched_priority,
            os.getpriority(os.PRIO_PROCESS, pid))


def packet_threads() -> list[PacketThread]:
    """The threaded-NAPI and cpumap kernel threads now, with their CPUs and scheduling."""
    out = []
    for t in cpustat.find_kthreads(PACKET_THREADS):
        try:
            policy, prio, nice = _policy(t.pid)
            out.append(PacketThread(t.pid, t.name, sorted(os.sched_getaffinity(t.pid)), policy, prio, nice))
        except OSError:  # gone meanwhile
            continue
    return out


def perfkit_interfaces(threads: Sequence[PacketThread]) -> list[Interface]:
    """The interfaces of the perfkit testbeds up now and their NAPI mode."""
    out = []
    script = 'cd /sys/class/net && for d in *; do printf "%s %s\\n" "$d" "$(cat "$d/threaded" 2>/dev/null)"; done'
    for rid in topology.running():
        for role in ("tester", "dut"):
            ns = f"{topology.PREFIX}{rid}-{role}"
            try:
                text = netns.run(ns, "sh", "-c", script)
            except Exception:  # noqa: BLE001 - a testbed going down meanwhile: skip it
                continue
            for line in text.splitlines():
                dev, _, threaded = line.partition(" ")
                if dev == "lo" or not dev:
                    continue
                state = {"1": True, "0": False}.get(threaded.strip())
                pids = [t.pid for t in threads if t.name.startswith(f"napi/{dev}-")]
                out.append(Interface(ns, dev, True if pids else state, pids))
    return out
