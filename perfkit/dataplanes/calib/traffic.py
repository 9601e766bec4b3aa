"""Calibrated-DUT traffic: plain IPv4/UDP frames of the RFC 2544 range, one UDP source port per flow.

Frame of flow i (``frame_size`` = the Ethernet frame, FCS included, untagged; it leaves the DUT the
same size)::

    Ether(p0 -> a) / IP(198.18.0.1 -> 198.19.0.1, DF, TTL 64, id 0) /
    UDP(10000 + i -> 5001, checksum 0) / signature / zero padding

Source ports wrap modulo 65536 beyond 55,536 flows (a UDP source port of 0 is allowed; nothing
but the steering hash looks at it). Frames enter the DUT at port ``a`` and leave by ``b``.
``check_output`` checks a frame the DUT emitted against the reference model (``model``).
"""
from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass, field

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from perfkit.dataplane import PortMacs, Traffic
from perfkit.dataplanes.calib.control import CalibConfig
from perfkit.dataplanes.calib.model import emit
from perfkit.errors import ConfigError
from perfkit.stl.fieldengine import FieldEngine, flow_engine
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.units import FCS_LEN, FRAME_MAX

SRC_ADDR, DST_ADDR = "198.18.0.1", "198.19.0.1"
SPORT_BASE, DPORT = 10000, 5001
#: Flows: one UDP source port each.
MAX_FLOWS = 65536
#: Offsets in the frame: IPv4 header, UDP header, signature.
IP_OFF, L4_OFF, SIG_OFF = 14, 34, 42


def sport(flow: int) -> int:
    return (SPORT_BASE + flow) & 0xFFFF


@dataclass(frozen=True)
class CalibTraffic(Traffic):
    """The traffic of one calibrated-DUT scenario, and the DUT configuration it is offered to
    (``config.work``: the work per packet; the egress port is the testbed's, set by ``load``)."""

    frame_size: int = 64
    flows: int = 1
    config: CalibConfig = field(default_factory=CalibConfig)
    ingress: str = "a"
    macs: PortMacs = field(default_factory=PortMacs)
    """The ports' MAC addresses: offered frames go from the tester's port to the DUT's ingress."""

    def on_ports(self, macs: PortMacs) -> CalibTraffic:
        src, dst = macs.out_of("b" if self.ingress == "a" else "a")
        return dataclasses.replace(self, macs=macs, config=dataclasses.replace(self.config, src_mac=src, dst_mac=dst))

    def __post_init__(self) -> None:
        if not 1 <= self.flows <= MAX_FLOWS:
            raise ConfigError("flows", self.flows, f"1 .. {MAX_FLOWS} (one UDP source port each)")
        if not self.min_frame_size <= self.frame_size <= FRAME_MAX:
            raise ConfigError("frame_size", self.frame_size,
                              f"{self.min_frame_size} .. {FRAME_MAX} bytes for IPv4/UDP with signature")

    def dut_config(self, ifindex_a: int = 1, ifindex_b: int = 2) -> CalibConfig:
        """The configuration ``load(self, ifindex_a, ifindex_b)`` gives the DUT: egress by the port
        the offered frames do not enter (default: the testbed's ports, as ``Dataplane.emit`` takes)."""
        return dataclasses.replace(self.config, egress_ifindex=ifindex_b if self.ingress == "a" else ifindex_a)

    @property
    def min_frame_size(self) -> int:
        return max(64, SIG_OFF + SIGNATURE.size + FCS_LEN)

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The frame offered for ``flow`` (without FCS), with a signature."""
        src, dst = self.macs.into(self.ingress)
        frame = _unsigned_frame(src, dst, sport(flow % self.flows), self.frame_size)
        sig = SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts)
        return frame[:SIG_OFF] + sig + frame[SIG_OFF + len(sig):]

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct calibrated DUT emits for ``packet(flow, ...)`` (the reference model's answer)."""
        return emit(self.packet(flow, seq, stream, ts), self.dut_config()).out or b""

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """The variation that walks the flows: the flow number, plus ``SPORT_BASE``, written into the
        UDP source port (16 bits: it wraps). No checksum changes: the IPv4 header stays the same and
        UDP sends none."""
        writes = [("udp.sport", L4_OFF, 2, SPORT_BASE)] if self.flows > 1 else []
        return flow_engine(writes, self.flows, [IP_OFF + 10], [[(IP_OFF, L4_OFF)]], SIG_OFF, flow_op,
                           l3_offset=IP_OFF)


@functools.lru_cache(maxsize=4096)
def _unsigned_frame(src: str, dst: str, source_port: int, frame_size: int) -> bytes:
    """A flow's frame (without FCS) with its signature zeroed, built once (scapy takes ~1 ms a frame;
    ``check_output`` rebuilds every captured frame's input, 64 a trial). ``packet`` writes the
    signature in: no other byte depends on it, as UDP carries no checksum and IPv4's covers its header."""
    hdr = (Ether(src=src, dst=dst) /
           IP(src=SRC_ADDR, dst=DST_ADDR, id=0, flags="DF", ttl=64) /
           UDP(sport=source_port, dport=DPORT, chksum=0))
    assert len(hdr) == SIG_OFF
    pad = frame_size - FCS_LEN - len(hdr) - SIGNATURE.size
    return bytes(hdr / Raw(b"\0" * (SIGNATURE.size + max(pad, 0))))


def check_output(frame: bytes, traffic: CalibTraffic) -> str | None:
    """None when ``frame`` (captured after the DUT) is what it emits for some packet of ``traffic``:
    the flow is read from the UDP source port and the signature from its place, the offered packet
    rebuilt with them and run through the model; the result must equal ``frame`` byte for byte.
    Otherwise one line naming the first difference."""
    if len(frame) < SIG_OFF + SIGNATURE.size:
        return f"frame of {len(frame)} bytes is too short for IPv4/UDP with a signature"
    flow = (struct.unpack_from("!H", frame, L4_OFF)[0] - SPORT_BASE) & 0xFFFF
    if flow >= traffic.flows:
        return f"UDP source port {struct.unpack_from('!H', frame, L4_OFF)[0]} is no flow of the profile"
    magic, stream, seq, ts = SIGNATURE.unpack_from(frame, SIG_OFF)
    if magic != SIGNATURE_MAGIC:
        return f"no signature (magic 0x{magic:04x})"
    want = emit(traffic.packet(flow, seq, stream, ts), traffic.dut_config())
    if want.out is None:
        return f"the model does not forward the rebuilt input ({want.stat})"
    return _first_difference(frame, want.out)


#: Names of the frame's bytes, for check_output's messages.
_FIELDS = [(0, 6, "eth.dst"), (6, 12, "eth.src"), (12, IP_OFF, "eth.type"), (IP_OFF, L4_OFF, "ipv4 header"),
           (L4_OFF, SIG_OFF, "udp header"), (SIG_OFF, SIG_OFF + SIGNATURE.size, "signature")]


def _first_difference(got: bytes, want: bytes) -> str | None:
    if got == want:
        return None
    for lo, hi, name in _FIELDS:
        if got[lo:hi] != want[lo:hi]:
            return f"{name} is {got[lo:hi].hex()}, expected {want[lo:hi].hex()}"
    if len(got) != len(want):
        return f"frame is {len(got)} bytes, expected {len(want)}"
    first = next(i for i in range(len(got)) if got[i] != want[i])
    return f"byte {first} is 0x{got[first]:02x}, expected 0x{want[first]:02x}"
