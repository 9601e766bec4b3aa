"""The device under test on the local testbed: the dataplane attached to the DUT ports, its
receive processing on dedicated cores, and its counters.

- One DUT core: the dataplane runs natively on both DUT ports; their threaded-NAPI kernel threads
  are pinned to the core.
- N DUT cores: ``bpf/steer.bpf.c`` runs on the ports (in the NAPI threads, pinned to the first DUT
  core) and spreads packets, by the key the dataplane chose (``Dataplane.steer_key``), over a cpumap
  whose kernel threads run the dataplane on each DUT core: RSS in software (seed 001).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from perfkit import cpustat
from perfkit.dataplane import Dataplane, Traffic
from perfkit.errors import ConfigError
from perfkit.layouts import STEER_MAX_CPUS, SteerKey, steer_config
from perfkit.libbpf import BpfObject, Program, prog_info, xdp_attach
from perfkit.paths import BUILD_DIR
from perfkit.testbed import netns
from perfkit.testbed.topology import Testbed, xdp_max_mtu

#: Frames a cpumap queue holds before it drops.
CPUMAP_QSIZE = 2048


@dataclass
class ProgRuntime:
    """Kernel BPF statistics of one program (needs BPF stats enabled)."""

    run_cnt: int
    run_time_ns: int


class Dut:
    """A dataplane on the testbed's DUT ports, configured and filled for a traffic profile."""

    def __init__(self, testbed: Testbed, dataplane: Dataplane, traffic: Traffic, cores: list[int]):
        if not cores or len(cores) > STEER_MAX_CPUS:
            raise ConfigError("dut_cores", cores, f"1 .. {STEER_MAX_CPUS} CPUs")
        if testbed.mtu > xdp_max_mtu():
            raise ConfigError("mtu", testbed.mtu, f"<= {xdp_max_mtu()}: native XDP on veth needs each frame in one "
                              "page (the programs do not handle multi-buffer frames)")
        self.testbed, self.dataplane, self.traffic, self.cores = testbed, dataplane, traffic, list(cores)
        self.steer: BpfObject | None = None
        multi = len(self.cores) > 1
        self.nf = dataplane.load(traffic, testbed.a.ifindex, testbed.b.ifindex, cpumap=multi)
        try:
            entry = self._setup_cpumap() if multi else self.nf.program
            for port in (testbed.a, testbed.b):
                with netns.inside(port.ns):
                    xdp_attach(port.ifindex, entry.fd)
            # SCHED_FIFO: like softirq processing on a real DUT, it runs before any user task
            self.napi_pids = [pid for port in (testbed.a, testbed.b)
                              for pid in testbed.pin_napi(port, {self.cores[0]}, realtime=True)]
            #: The threads that process the DUT's packets (NAPI, and cpumap kthreads with several cores).
            self.packet_threads = list(self.napi_pids)
            if multi:
                for t in cpustat.find_kthreads(f"cpumap/*/map:{self.cpumap_id}"):
                    os.sched_setscheduler(t.pid, os.SCHED_FIFO, os.sched_param(50))
                    self.packet_threads.append(t.pid)
        except BaseException:
            self.close()
            raise

    def _setup_cpumap(self) -> Program:
        cfg = steer_config(ncpus=len(self.cores), key=SteerKey[f"STEER_KEY_{self.dataplane.steer_key.upper()}"])
        for i, c in enumerate(self.cores):
            cfg.cpus[i] = c
        self.steer = BpfObject(BUILD_DIR / "steer.o", rodata=cfg)
        cpumap = self.steer.map("cpu_map")
        for c in self.cores:
            cpumap.update(struct.pack("=I", c), struct.pack("=Ii", CPUMAP_QSIZE, self.nf.program.fd))
        self.cpumap_id = cpumap.id
        return self.steer.program("xdp_steer")

    @property
    def programs(self) -> list[Program]:
        """The DUT's XDP programs (entry first)."""
        progs = [self.steer.program("xdp_steer")] if self.steer else []
        return progs + [self.nf.program]

    def runtime(self) -> dict[str, ProgRuntime]:
        out = {}
        for p in self.programs:
            info = prog_info(p.fd)
            out[p.name] = ProgRuntime(info.run_cnt, info.run_time_ns)
        return out

    @property
    def kthread_patterns(self) -> list[str]:
        """Names of the DUT's kernel threads, for per-thread CPU accounting."""
        pats = [f"napi/{self.testbed.a.dev}-*", f"napi/{self.testbed.b.dev}-*"]
        if self.steer:
            pats.append(f"cpumap/*/map:{self.cpumap_id}")
        return pats

    def counters(self) -> dict[str, int]:
        """Packets per dataplane counter."""
        return self.nf.counters()

    def drops(self, before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        """Counters that rose between two ``counters()`` readings and are not forwarding ones."""
        forwarding = self.dataplane.forward_counters
        return {k: after[k] - before.get(k, 0) for k in after
                if k not in forwarding and after[k] != before.get(k, 0)}

    def check_output(self, frame: bytes) -> str | None:
        return self.dataplane.check_output(self.traffic, frame)

    def close(self) -> None:
        if self.steer:
            self.steer.close()
            self.steer = None
        self.nf.close()
