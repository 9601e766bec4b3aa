"""The DUT's cores on the local veth testbed: which CPUs the DUT and the tester get, the receive
queue each DUT core serves, and what the DUT's packet threads cost per core and per packet.

Cores: the DUT gets the last ``dut_cores`` CPUs; generator and sink threads share the others. When
the machine has no CPU left for the tester, it shares a DUT core and ``shared_cores`` says so.

Busy, per core: ``dut_busy_per_core`` is the CPU time of the DUT's packet threads pinned to each DUT
core over the window (``dut_busy`` is their mean), and ``ring_cores`` says whose receive queue
overflowed: the veth port's ring in front of the DUT's NAPI threads is one queue on one core (the
first DUT core's; with several cores its NAPI threads steer to the cpumap), the cpumap's queues
are one per core, fed by a hash, and which of them overflowed is not counted anywhere (the
hand-off redirected more than the DUT programs processed, on whichever core): then every DUT core
is named, and searches judge the busiest of them -- never a mean that an idle core pulls down.
"""
from __future__ import annotations

import os

from perfkit.host import disturbance
from perfkit.errors import ConfigError
from perfkit.testbed.dut import CPUMAP_QSIZE

#: Frames a veth port's XDP receive ring holds (the kernel's VETH_RING_SIZE): what overflows when
#: the port's NAPI thread does not run.
RING_FRAMES = 256
#: Frames of the DUT's receive queue by default: 0, the veth ports' own rings (the DUT's packet
#: threads are its NAPI threads, as on a NIC). ``NIC_RX_QUEUE`` is a NIC's ring for searches that
#: must see through host stalls (see ``perfkit.testbed.dut``).
RX_QUEUE = 0
NIC_RX_QUEUE = 4096
#: The CPUs this process may use, as it started (generators narrow the affinity while they run).
_CPUS = sorted(os.sched_getaffinity(0))


def allocate_cores(dut_cores: int, tester_cores: list[int] | None = None) -> tuple[list[int], list[int], bool]:
    """(DUT cores, tester cores, shared) from the CPUs this process may use."""
    cpus = _CPUS
    if not 1 <= dut_cores <= len(cpus):
        raise ConfigError("dut_cores", dut_cores, f"1 .. {len(cpus)} (CPUs available here)")
    if tester_cores:
        bad = [c for c in tester_cores if c not in cpus]
        if bad:
            raise ConfigError("tester_cores", tester_cores, f"CPUs of {cpus}")
        free = [c for c in cpus if c not in tester_cores]
        dut = free[-dut_cores:] if len(free) >= dut_cores else cpus[-dut_cores:]
        return dut, list(tester_cores), bool(set(dut) & set(tester_cores))
    dut = cpus[-dut_cores:]
    tester = [c for c in cpus if c not in dut]
    return (dut, tester, False) if tester else (dut, [cpus[0]], True)


def thread_cores(pids: list[int]) -> dict[int, int]:
    """The core each of these threads is pinned to (threads allowed on several CPUs, or gone, are
    left out): the DUT's NAPI threads and cpumap kthreads each run on one."""
    out = {}
    for pid in pids:
        try:
            cpus = os.sched_getaffinity(pid)
        except OSError:
            continue
        if len(cpus) == 1:
            out[pid] = next(iter(cpus))
    return out


def busy_per_core(thread_ns: dict[int, int], cores_of: dict[int, int], window_ns: int,
                  cores: list[int]) -> dict[str, float]:
    """Per DUT core, the share of the window [0..1] its packet threads ran: ``thread_ns`` is each
    thread's CPU time in the window [ns], ``cores_of`` the core each is pinned to."""
    if window_ns <= 0:
        return {}
    return {str(c): sum(ns for pid, ns in thread_ns.items() if cores_of.get(pid) == c) / window_ns for c in cores}


def dut_queues(cores: list[int], rx_queue: int) -> dict[int, disturbance.Queue]:
    """The receive queue each DUT core serves (``perfkit.testbed.dut``): the veth port's ring on the
    core of the NAPI threads (the first; the whole rate passes it), else the cpumap's queue of
    ``rx_queue`` frames (``CPUMAP_QSIZE`` behind the veth ring), each an even share of the rate."""
    share = 1 / len(cores)
    if rx_queue:
        return {c: disturbance.Queue(rx_queue, share) for c in cores}
    return {c: disturbance.Queue(RING_FRAMES, 1.0) if i == 0 else disturbance.Queue(CPUMAP_QSIZE, share)
            for i, c in enumerate(cores)}


def dut_cost(thread_ns: int, packets: int, bpf_ns: int, window_ns: int, cores: int) -> dict[str, float | None]:
    """The DUT-cost fields of ``TrialResult`` from its packet threads' CPU time [ns], the packets its
    program processed, the program's run time [ns] and the window [ns] on ``cores`` DUT cores."""
    if packets <= 0 or thread_ns <= 0:
        return {"dut_busy": thread_ns / (window_ns * cores) if window_ns > 0 else None}
    per_packet = thread_ns / packets
    return {"dut_ns_per_packet": per_packet, "kernel_ns_per_packet": per_packet - bpf_ns / packets,
            "dut_busy": thread_ns / (window_ns * cores), "dut_capacity_pps": cores * 1e9 / per_packet}
