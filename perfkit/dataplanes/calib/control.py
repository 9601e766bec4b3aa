"""Control plane of the calibrated DUT (``bpf/calib.bpf.c``): load it, configure it (egress port,
Ethernet addresses, work per packet), read its counters."""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from pathlib import Path

from perfkit.dataplanes.calib.layouts import CALIB_MAX_WORK, CalibStat, calib_config, calib_stat_rec
from perfkit.errors import ConfigError
from perfkit.libbpf import BpfObject, Map, Program
from perfkit.testbed.bpfbuild import object_path
from perfkit.netaddr import mac_bytes
from perfkit.testbed.topology import PORT_MACS


@dataclass(frozen=True)
class CalibConfig:
    """Run-time configuration (``struct calib_config``). The defaults forward from DUT port ``a``
    to ``b``: what leaves is addressed from ``b`` to the tester port ``p1`` behind it."""

    egress_ifindex: int = 0
    """Port every forwarded frame leaves by (bpf_redirect); 0: not set, frames are dropped."""
    work: int = 0
    """Work iterations per forwarded packet (the program's ``bpf_loop``)."""
    drop_every: int = 0
    """Drop every Nth packet a CPU works on, after its work (``drop_every`` counter); 0: never."""
    src_mac: str = PORT_MACS["b"]
    dst_mac: str = PORT_MACS["p1"]

    def __post_init__(self) -> None:
        if isinstance(self.work, bool) or not 0 <= self.work <= CALIB_MAX_WORK:
            raise ConfigError("work_iterations", self.work, f"0 .. {CALIB_MAX_WORK}")
        if isinstance(self.drop_every, bool) or not 0 <= self.drop_every < 1 << 32:
            raise ConfigError("drop_every", self.drop_every, "an integer 0 .. 4294967295 (0: never)")
        if not 0 <= self.egress_ifindex < 1 << 32:
            raise ConfigError("egress_ifindex", self.egress_ifindex, "an interface index (0: none)")

    def to_struct(self) -> calib_config:
        c = calib_config(egress_ifindex=self.egress_ifindex, work=self.work, drop_every=self.drop_every)
        ctypes.memmove(c.src_mac, mac_bytes(self.src_mac), 6)
        ctypes.memmove(c.dst_mac, mac_bytes(self.dst_mac), 6)
        return c


@dataclass
class Counters:
    """One counter of ``calib_stats`` summed over CPUs."""

    packets: int = 0
    bytes: int = 0
    """Frame bytes as received."""
    iterations: int = 0
    """Work iterations done (forwarded packets only): ``packets * work`` when all is well."""


@dataclass
class Calib:
    """A loaded calibrated DUT. ``Calib.load()`` then ``configure()``."""

    obj: BpfObject
    config: CalibConfig = field(default_factory=CalibConfig)

    @classmethod
    def load(cls, path: Path | str | None = None, attach_type: int | None = None) -> Calib:
        """Load ``build/bpf/calib.o``; ``attach_type=libbpf.BPF_XDP_CPUMAP`` to run it in a cpumap."""
        obj = BpfObject(Path(path) if path else object_path("calib"),
                        attach_types={"xdp_calib": attach_type} if attach_type is not None else None)
        c = cls(obj)
        c.configure(c.config)
        return c

    @property
    def program(self) -> Program:
        return self.obj.program("xdp_calib")

    def map(self, name: str) -> Map:
        return self.obj.map(name)

    def configure(self, config: CalibConfig) -> None:
        self.map("calib_config").update(struct.pack("=I", 0), config.to_struct())
        self.config = config

    def stats(self) -> dict[str, Counters]:
        """What happened to packets so far, by ``CalibStat.label``, summed over CPUs."""
        m = self.map("calib_stats")
        out = {}
        for stat in CalibStat:
            if stat is CalibStat.CALIB_STAT_MAX:
                continue
            raw = m.lookup(struct.pack("=I", int(stat))) or b""
            recs = [calib_stat_rec.from_bytes(v) for v in m.percpu_values(raw)]
            out[stat.label] = Counters(sum(r.packets for r in recs), sum(r.bytes for r in recs),
                                       sum(r.iterations for r in recs))
        return out

    def close(self) -> None:
        self.obj.close()

    def __enter__(self) -> Calib:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
