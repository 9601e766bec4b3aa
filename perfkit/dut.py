"""The device under test on the local testbed: the dataplane attached to the DUT ports, its
receive processing on dedicated cores, and its counters.

- One DUT core: the PGW-U runs natively on both DUT ports; their threaded-NAPI kernel threads are
  pinned to the core.
- N DUT cores: ``bpf/steer.bpf.c`` runs on the ports (in the NAPI threads, pinned to the first DUT
  core) and spreads packets by TEID / destination over a cpumap whose kernel threads run the PGW-U
  on each DUT core: GTP-U RSS in software (seed 001).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from perfkit import cpustat, netns
from perfkit.errors import ConfigError
from perfkit.layouts import STEER_MAX_CPUS, steer_config
from perfkit.libbpf import BPF_XDP_CPUMAP, BpfObject, Program, prog_info, xdp_attach
from perfkit.pgwu import BUILD_DIR, Pgwu, PgwuConfig
from perfkit.profiles import TrafficProfile
from perfkit.testbed import Testbed, xdp_max_mtu

#: Frames a cpumap queue holds before it drops.
CPUMAP_QSIZE = 2048


@dataclass
class ProgRuntime:
    """Kernel BPF statistics of one program (needs BPF stats enabled)."""

    run_cnt: int
    run_time_ns: int


class Dut:
    """The PGW-U on the testbed's DUT ports, configured and filled from a traffic profile."""

    def __init__(self, testbed: Testbed, profile: TrafficProfile, cores: list[int], max_sessions: int | None = None):
        if not cores or len(cores) > STEER_MAX_CPUS:
            raise ConfigError("dut_cores", cores, f"1 .. {STEER_MAX_CPUS} CPUs")
        if testbed.mtu > xdp_max_mtu():
            raise ConfigError("mtu", testbed.mtu, f"<= {xdp_max_mtu()}: native XDP on veth needs each frame in one "
                              "page (the programs do not handle multi-buffer frames)")
        self.testbed, self.profile, self.cores = testbed, profile, list(cores)
        self.steer: BpfObject | None = None
        config = PgwuConfig(s5_ifindex=testbed.a.ifindex, sgi_ifindex=testbed.b.ifindex,
                            s5_vlan=profile.config.s5_vlan, udp_csum=profile.config.udp_csum)
        #: What the dataplane was set up to do: the reference for checking what it emits.
        self.intended_config = config
        multi = len(self.cores) > 1
        self.pgwu = Pgwu.load(max_sessions=max_sessions or max(profile.plan.count, 1024),
                              attach_type=BPF_XDP_CPUMAP if multi else None)
        try:
            self.pgwu.configure(config)
            self.pgwu.add_sessions(profile.plan)
            entry = self._setup_cpumap() if multi else self.pgwu.program
            for port in (testbed.a, testbed.b):
                with netns.inside(port.ns):
                    xdp_attach(port.ifindex, entry.fd)
            # SCHED_FIFO: like softirq processing on a real DUT, it runs before any user task
            self.napi_pids = [pid for port in (testbed.a, testbed.b)
                              for pid in testbed.pin_napi(port, {self.cores[0]}, realtime=True)]
            if multi:
                for t in cpustat.find_kthreads(f"cpumap/*/map:{self.cpumap_id}"):
                    os.sched_setscheduler(t.pid, os.SCHED_FIFO, os.sched_param(50))
        except BaseException:
            self.close()
            raise

    def _setup_cpumap(self) -> Program:
        cfg = steer_config(ncpus=len(self.cores))
        for i, c in enumerate(self.cores):
            cfg.cpus[i] = c
        self.steer = BpfObject(BUILD_DIR / "steer.o", rodata=cfg)
        cpumap = self.steer.map("cpu_map")
        for c in self.cores:
            cpumap.update(struct.pack("=I", c), struct.pack("=Ii", CPUMAP_QSIZE, self.pgwu.program.fd))
        self.cpumap_id = cpumap.id
        return self.steer.program("xdp_steer")

    @property
    def programs(self) -> list[Program]:
        """The DUT's XDP programs (entry first)."""
        progs = [self.steer.program("xdp_steer")] if self.steer else []
        return progs + [self.pgwu.program]

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
        """Packets per PGW-U counter (``PgwuStat.label``)."""
        return {k: v.packets for k, v in self.pgwu.stats().items()}

    def close(self) -> None:
        if self.steer:
            self.steer.close()
            self.steer = None
        self.pgwu.close()
