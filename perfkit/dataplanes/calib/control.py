"""Control plane of the calibrated DUT (``bpf/calib.bpf.c``): load it, configure it (egress port,
Ethernet addresses, work per packet), read its counters."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from perfkit.dataplane import BpfControl
from perfkit.dataplanes.calib.layouts import CALIB_MAX_WORK, CalibStat, calib_config, calib_stat_rec
from perfkit.errors import ConfigError
from perfkit.testbed.bpfbuild import Built
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
class Calib(BpfControl):
    """A loaded calibrated DUT. ``Calib.load()`` then ``configure()``; ``stats()`` counts packets,
    bytes (as received) and ``iterations`` (work done, forwarded packets only: ``packets * work``
    when all is well)."""

    name: ClassVar[str] = "calib"
    object_file: ClassVar[Built] = Built("calib")
    entry: ClassVar[str] = "xdp_calib"
    config_map: ClassVar[str] = "calib_config"
    stats_map: ClassVar[str] = "calib_stats"
    stat: ClassVar[type[CalibStat]] = CalibStat
    stat_rec: ClassVar[type[calib_stat_rec]] = calib_stat_rec
    config: CalibConfig = field(default_factory=CalibConfig)

    @classmethod
    def load(cls, path: Path | str | None = None, cpumap: bool = False) -> Calib:
        """Load ``build/bpf/calib.o``; ``cpumap``: to run it in a cpumap."""
        return cls(cls.open(path, cpumap)).start()
