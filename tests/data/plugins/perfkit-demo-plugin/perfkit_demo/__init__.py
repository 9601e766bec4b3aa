"""A dataplane written outside perfkit, against its public interface (docs/dataplane-api.md) only:
a forwarder (``fwd.bpf.c``, compiled on first use) with counters, its own traffic, and no reference
model. ``WrongModel`` adds a model that is deliberately wrong for flow 2."""
from __future__ import annotations

import ctypes
import enum
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from perfkit.dataplane import API_VERSION, BpfControl, BpfDut, Dataplane, Emitted, Param, PortMacs, Traffic
from perfkit.layouts import Struct
from perfkit.stl.fieldengine import FieldEngine, flow_engine
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC

SOURCE = Path(__file__).with_name("fwd.bpf.c")
IP_OFF, L4_OFF, SIG_OFF = 14, 34, 42
FCS_LEN = 4


def object_file() -> Path:
    """fwd.bpf.c compiled (once per source) into a cache directory."""
    text = SOURCE.read_bytes()
    cache = Path(os.environ.get("PERFKIT_DEMO_CACHE", tempfile.gettempdir())) / "perfkit-demo"
    obj = cache / f"fwd-{hashlib.sha256(text).hexdigest()[:16]}.o"
    if not obj.exists():
        cache.mkdir(parents=True, exist_ok=True)
        arch = os.uname().machine
        tmp = obj.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}-linux-gnu", "-c",
                        str(SOURCE), "-o", str(tmp)], check=True)
        tmp.replace(obj)
    return obj


class demo_config(Struct):
    _fields_ = [("egress_ifindex", ctypes.c_uint32)]


class demo_stat_rec(Struct):
    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class DemoStat(enum.IntEnum):
    FWD = 0
    DROP = 1
    MAX = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class DemoConfig:
    egress_ifindex: int = 0

    def to_struct(self) -> demo_config:
        return demo_config(egress_ifindex=self.egress_ifindex)


@dataclass
class DemoControl(BpfControl):
    name: ClassVar[str] = "demo"
    object_file: ClassVar = object_file
    entry: ClassVar[str] = "xdp_demo_fwd"
    config_map: ClassVar[str] = "demo_config"
    stats_map: ClassVar[str] = "demo_stats"
    stat: ClassVar[type[DemoStat]] = DemoStat
    stat_rec: ClassVar[type[demo_stat_rec]] = demo_stat_rec
    config: DemoConfig = field(default_factory=DemoConfig)


@dataclass(frozen=True)
class DemoTraffic(Traffic):
    """IPv4/UDP frames from 198.18.0.1 to 198.19.0.1, one UDP source port per flow."""

    frame_size: int = 64
    flows: int = 1
    ingress: str = "a"
    macs: PortMacs = field(default_factory=PortMacs)

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        src, dst = self.macs.into(self.ingress)
        hdr = (Ether(src=src, dst=dst) / IP(src="198.18.0.1", dst="198.19.0.1", id=0, ttl=64) /
               UDP(sport=10000 + flow % self.flows, dport=5001, chksum=0))
        pad = self.frame_size - FCS_LEN - len(hdr) - SIGNATURE.size
        return bytes(hdr / Raw(SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts) + b"\0" * pad))

    def on_ports(self, macs: PortMacs) -> DemoTraffic:
        """The same frames between ports with other MAC addresses (a lab's)."""
        return replace(self, macs=macs)

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        writes = [("udp.sport", L4_OFF, 2, 10000)] if self.flows > 1 else []
        return flow_engine(writes, self.flows, [IP_OFF + 10], [[(IP_OFF, L4_OFF)]], SIG_OFF, flow_op,
                           l3_offset=IP_OFF)


class DemoDataplane(Dataplane):
    name = "demo"
    title = "Demo forwarder (plugin)"
    api_version = API_VERSION
    ports = ("a", "b")
    params = (Param("mode", "fwd", "what the program does", choices=("fwd",)),)
    variant = "mode"
    forward_counters = frozenset({"fwd"})
    layouts = {"demo_config": demo_config, "demo_stat_rec": demo_stat_rec}

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> DemoTraffic:
        return DemoTraffic(frame_size=frame_size, flows=flows)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> BpfDut:
        egress = ifindex_b if traffic.ingress == "a" else ifindex_a
        return BpfDut(DemoControl(DemoControl.open(cpumap=cpumap)), DemoConfig(egress), traffic)


class WrongModel(DemoDataplane):
    """The demo with a reference model that is wrong for flow 2 (it says the frame is dropped)."""

    name = "demowrong"
    title = "Demo forwarder with a wrong model (plugin)"

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        if int.from_bytes(frame[L4_OFF:L4_OFF + 2], "big") == 10002:
            return Emitted("XDP_DROP", "drop")
        return Emitted("XDP_REDIRECT", "fwd", frame)

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        return None if frame[:SIG_OFF] == traffic.packet(0)[:SIG_OFF] or len(frame) == traffic.wire_frame_size - FCS_LEN \
            else "not a frame of the traffic"


DATAPLANE = DemoDataplane()


class OldDataplane(DemoDataplane):
    name = "demoold"
    api_version = 1


OLD = OldDataplane()
