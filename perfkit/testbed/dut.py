"""The device under test on the local testbed: the dataplane attached to the DUT ports, its
receive processing on dedicated cores, and its counters.

- One DUT core: the dataplane runs natively on both DUT ports; their threaded-NAPI kernel threads
  are pinned to the core.
- N DUT cores: ``bpf/steer.bpf.c`` runs on the ports (in the NAPI threads, pinned to the first DUT
  core) and spreads packets, by the words the dataplane chose (``Dataplane.steering``), over a cpumap
  whose kernel threads run the dataplane on each DUT core: RSS in software (seed 001).
- A NIC-sized receive queue (``rx_queue`` frames, any number of cores): as with N cores, but the
  ports' NAPI threads run on the tester's cores (``nic_cores``) and only hand frames over to the
  cpumap, whose queue of ``rx_queue`` frames plays the NIC's descriptor ring. A veth port's own ring
  holds 256 frames, a quarter of a millisecond at 1 Mpps: on a VM, where the host takes a vCPU
  away for 1-4 ms, it overflows when the DUT core stalls, and the loss looks like the DUT's. A real
  NIC's ring (1024-4096 descriptors) fills without the CPU, so a DUT stall shorter than the ring
  costs latency, not frames. The hand-off is the NIC's work: its CPU time is the tester's, not the
  DUT's; the DUT's packet threads are the cpumap kthreads.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass


from perfkit import accounting
from perfkit.host import cpustat
from perfkit.dataplane import Dataplane, Traffic
from perfkit.encap import BY_FLOW
from perfkit.errors import ConfigError, TestbedError
from perfkit.layouts import STEER_MAX_CPUS
from perfkit.libbpf import BpfObject, Program, prog_info, xdp_attach, xdp_prog_id
from perfkit.provenance import object_hashes
from perfkit.testbed.bpfbuild import object_path
from perfkit.testbed.sink import SinkReport
from perfkit.testbed import netns
from perfkit.testbed.topology import Testbed, xdp_max_mtu

#: Frames a cpumap queue holds before it drops (several DUT cores, no ``rx_queue``).
CPUMAP_QSIZE = 2048
#: The kernel's limit on a cpumap queue (kernel/bpf/cpumap.c).
RX_QUEUE_MAX = 16384


@dataclass
class ProgRuntime:
    """Kernel BPF statistics of one program (needs BPF stats enabled)."""

    run_cnt: int
    run_time_ns: int


class Dut:
    """A dataplane on the testbed's DUT ports, configured and filled for a traffic profile."""

    def __init__(self, testbed: Testbed, dataplane: Dataplane, traffic: Traffic, cores: list[int],
                 rx_queue: int = 0, nic_cores: list[int] | None = None, steering: str = "dataplane",
                 xdp_mode: str = "native"):
        """``rx_queue``: frames of the NIC-sized receive queue (0: the veth ports' own rings), whose
        hand-off runs on ``nic_cores`` (the tester's). ``steering`` and ``xdp_mode``: the knobs of
        those names (``perfkit.knobs.SETUP_KNOBS``): what several DUT cores are spread by, and how the
        entry program is attached (native, or generic: the kernel's skb path)."""
        if not cores or len(cores) > STEER_MAX_CPUS:
            raise ConfigError("dut_cores", cores, f"1 .. {STEER_MAX_CPUS} CPUs")
        check_rx_queue(rx_queue)
        if rx_queue and not nic_cores:
            raise ConfigError("nic_cores", nic_cores, "the tester's cores, for the receive queue's hand-off")
        if testbed.mtu > xdp_max_mtu():
            raise ConfigError("mtu", testbed.mtu, f"<= {xdp_max_mtu()}: native XDP on veth needs each frame in one "
                              "page (the programs do not handle multi-buffer frames)")
        self.testbed, self.dataplane, self.traffic, self.cores = testbed, dataplane, traffic, list(cores)
        self.steer: BpfObject | None = None
        self.steering, self.xdp_mode = steering, xdp_mode
        self.rx_queue = rx_queue
        multi = len(self.cores) > 1 or rx_queue > 0
        # a dataplane that writes ifindexes into maps (a description's devmap) or runs its NF's loader
        # there is told the DUT's namespace
        in_ns = {"netns": testbed.dut_ns} if getattr(dataplane, "loads_in_netns", False) else {}
        # in the DUT's namespace: an NF's own loader (its setup command) finds the ports there
        with netns.inside(testbed.dut_ns):
            self.nf = dataplane.load(traffic, testbed.a.ifindex, testbed.b.ifindex, cpumap=multi, **in_ns)
        try:
            if self.nf.attached_by_nf:
                self._check_nf_attached(multi)
            else:
                self._attach(self._setup_cpumap(rx_queue or CPUMAP_QSIZE) if multi else self.nf.program)
            napi_cores = set(nic_cores) if rx_queue and nic_cores else {self.cores[0]}
            # SCHED_FIFO: like softirq processing on a real DUT, it runs before any user task
            self.napi_pids = [pid for port in (testbed.a, testbed.b)
                              for pid in testbed.pin_napi(port, napi_cores, realtime=True)]
            #: The threads that process the DUT's packets (NAPI unless it is the NIC's hand-off, and
            #: cpumap kthreads).
            self.packet_threads = [] if rx_queue else list(self.napi_pids)
            if multi:
                for t in cpustat.find_kthreads(f"cpumap/*/map:{self.cpumap_id}"):
                    os.sched_setscheduler(t.pid, os.SCHED_FIFO, os.sched_param(50))
                    self.packet_threads.append(t.pid)
        except BaseException:
            self.close()
            raise

    def _attach(self, entry: Program) -> None:
        for port in (self.testbed.a, self.testbed.b):
            with netns.inside(port.ns):
                xdp_attach(port.ifindex, entry.fd, mode=self.xdp_mode)
                if xdp_prog_id(port.ifindex, self.xdp_mode) != prog_info(entry.fd).id:  # read back
                    raise TestbedError(f"knob xdp_mode={self.xdp_mode}: {port.dev} has no {self.xdp_mode} XDP program")

    def _check_nf_attached(self, multi: bool) -> None:
        """The NF's loader attached its program: it must be the one on the ingress port (in either
        mode), and it runs there alone (perfkit's steering cannot go in front of it)."""
        if multi:
            raise ConfigError("dut_cores", self.cores, "1 core and no rx_queue: the NF's own loader attached "
                              f"{self.dataplane.name}, so perfkit cannot spread it over a cpumap")
        port = self.testbed.a if self.traffic.ingress == "a" else self.testbed.b
        want = prog_info(self.nf.program.fd).id
        with netns.inside(port.ns):
            ids = {xdp_prog_id(port.ifindex, mode) for mode in ("native", "generic")}
        if want not in ids:
            raise TestbedError(f"dataplane {self.dataplane.name}: its setup attached program id {want} is not on "
                               f"the ingress port {port.dev} (attached there: {sorted(ids - {0}) or 'none'})")

    def _setup_cpumap(self, qsize: int) -> Program:
        steering = BY_FLOW if self.steering == "5tuple" else self.dataplane.steering
        cpus = self.cores[:1] if self.steering == "none" else self.cores
        self.steer = BpfObject(object_path("steer"), rodata=steering.to_struct(cpus))
        cpumap = self.steer.map("cpu_map")
        for c in self.cores:
            cpumap.update(struct.pack("=I", c), struct.pack("=Ii", qsize, self.nf.program.fd))
        self.cpumap_id = cpumap.id
        return self.steer.program("xdp_steer")

    @property
    def programs(self) -> list[Program]:
        """The DUT's XDP programs (entry first)."""
        progs = [self.steer.program("xdp_steer")] if self.steer else []
        return progs + [self.nf.program]

    @property
    def dut_programs(self) -> list[Program]:
        """The programs whose run time is the DUT's (the hand-off to a NIC-sized queue is the NIC's)."""
        return [self.nf.program] if self.rx_queue else self.programs

    def runtime(self) -> dict[str, ProgRuntime]:
        """Run counts and times of ``programs``, by program name (entry first)."""
        out = {}
        for p in self.programs:
            info = prog_info(p.fd)
            out[p.name] = ProgRuntime(info.run_cnt, info.run_time_ns)
        return out

    @property
    def kthread_patterns(self) -> list[str]:
        """Names of the DUT's kernel threads, for per-thread CPU accounting."""
        pats = [] if self.rx_queue else [f"napi/{self.testbed.a.dev}-*", f"napi/{self.testbed.b.dev}-*"]
        if self.steer:
            pats.append(f"cpumap/*/map:{self.cpumap_id}")
        return pats

    def counters(self) -> dict[str, int]:
        """Packets per dataplane counter."""
        return self.nf.counters()

    def tables(self) -> dict[str, float]:
        """What the dataplane's tables hold, read back (``DutProgram.tables``)."""
        return self.nf.tables()

    def read_counters(self) -> tuple[dict[str, int], dict[int, int]]:
        """Packets per dataplane counter, and packets forwarded per DUT core, from one reading of the
        dataplane's per-CPU counters (its totals alone when it keeps none per CPU)."""
        per_cpu = self.nf.counters_per_cpu()
        if not per_cpu:
            return self.nf.counters(), {}
        totals: dict[str, int] = {}
        for counts in per_cpu.values():
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
        forwarding = self.dataplane.forwarding(self.traffic)
        return totals, {c: sum(n for k, n in per_cpu.get(c, {}).items() if k in forwarding) for c in self.cores}

    def drops(self, before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        """Counters that rose between two ``counters()`` readings and are not forwarding ones."""
        return accounting.counter_drops(before, after, self.dataplane.forwarding(self.traffic))

    def check_output(self, frame: bytes) -> str | None:
        return self.dataplane.output_check(self.traffic, frame)

    def object_hashes(self) -> dict[str, str]:
        """sha256 of every BPF object the DUT loaded (the dataplane's, the steering program's), by path."""
        return {**self.nf.object_hashes(), **object_hashes([self.steer])}

    def close(self) -> None:
        if self.steer:
            self.steer.close()
            self.steer = None
        if netns.exists(self.testbed.dut_ns):  # an NF's teardown runs where its setup did
            with netns.inside(self.testbed.dut_ns):
                self.nf.close()
        else:
            self.nf.close()


class CounterSink:
    """Where XDP_DROP traffic is "received": the packets the DUT's forwarding counters (here: those
    that mean dropped as intended, ``Dataplane.forwarding``) counted between ``reset`` and ``read``,
    as a sink would report them (no sequence or latency figures). ``wire_frame_size``: bytes of each
    offered frame [bytes, FCS included]."""

    def __init__(self, dut: Dut, wire_frame_size: int):
        self.dut, self.wire_frame_size = dut, wire_frame_size
        self.base = dut.counters()

    def reset(self, capture_max: int | None = None) -> None:
        self.base = self.dut.counters()

    def totals(self) -> tuple[int, int]:
        n = accounting.handled(self.base, self.dut.counters(), self.dut.dataplane.forwarding(self.dut.traffic))
        return n, n * self.wire_frame_size

    def read(self) -> SinkReport:
        return SinkReport.counted(*self.totals())

    def close(self) -> None:
        """Nothing to release (the DUT is closed on its own)."""


def check_rx_queue(rx_queue: object) -> None:
    """Refuse a receive queue size the cpumap cannot have."""
    if isinstance(rx_queue, bool) or not isinstance(rx_queue, int) or not (rx_queue == 0 or 8 <= rx_queue <= RX_QUEUE_MAX):
        raise ConfigError("rx_queue", rx_queue, f"0 (the veth rings) or 8 .. {RX_QUEUE_MAX} frames")
