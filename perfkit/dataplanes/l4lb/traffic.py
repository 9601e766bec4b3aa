"""L4 load balancer traffic: clients of the RFC 2544 range talking to the VIPs.

Frame of flow i (``frame_size`` = the client's Ethernet frame, FCS included, untagged)::

    Ether(client router -> LB ingress) / IP(198.18.0.0 + i -> VIP i % vips, DF, TTL 64, id 0) /
    UDP(10000 + i -> 443, checksum 0) | TCP(10000 + i -> 80, ACK) / signature / zero padding

Every VIP is installed with its own ``reals``; with fewer flows than VIPs, flow i goes to VIP i and
the other VIPs are installed but get no traffic (a single flow at an LB that serves many VIPs).

UDP goes to port 443 (QUIC, the reason seed 000 added UDP), TCP to 80. Source ports wrap modulo
65536 beyond 55,536 flows (a UDP source port of 0 is allowed; the LB only hashes it). What leaves
the LB is the same packet in IPIP, 20 bytes longer, towards the real Maglev picks.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from perfkit.dataplane import PortMacs, Traffic
from perfkit.dataplanes.l4lb.config import CLIENT_BASE, CLIENT_POOL, REAL_BASE, VIP_BASE, L4lbConfig, Vip
from perfkit.dataplanes.l4lb.layouts import L4LB_MAX_VIPS
from perfkit.dataplanes.l4lb.maglev import Pool
from perfkit.dataplanes.l4lb.model import emit
from perfkit.errors import ConfigError
from perfkit.netaddr import int2ip
from perfkit.stl.fieldengine import FieldEngine, FieldWrite, FlowVar, csum_mask, flow_engine
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.units import FCS_LEN, FRAME_MAX

PROTOCOLS = ("udp", "tcp")
#: Destination port of each protocol's VIPs.
VIP_PORT = {"udp": 443, "tcp": 80}
SPORT_BASE = 10000
#: Largest frame offered [bytes, FCS included].
#: Reals per VIP times VIPs must fit below 198.19.255.0 (and the reals map).
MAX_REALS_TOTAL = 4095


@dataclass(frozen=True)
class L4lbTraffic(Traffic):
    """The traffic of one load-balancer scenario: sizes, flows, transport and the VIPs it targets."""

    frame_size: int = 64
    """The client's Ethernet frame [bytes], FCS included, untagged."""
    flows: int = 1
    """Distinct client (address, source port) pairs, at most 65536; a multiple of ``vips`` when there
    are more flows than VIPs."""
    proto: str = "udp"
    """The clients' transport: udp or tcp."""
    vips: int = 1
    """VIPs installed; the flows spread over them (flow i goes to VIP i % vips)."""
    reals: int = 16
    """Reals per VIP (each VIP has its own)."""
    mss_clamp: bool = False
    """The VIPs clamp the MSS option of TCP SYNs (``Vip.mss_clamp``)."""
    config: L4lbConfig = field(default_factory=L4lbConfig)
    ingress: str = "a"
    macs: PortMacs = field(default_factory=PortMacs)
    """The ports' MAC addresses: clients' frames go from the tester's port to the DUT's ingress; the
    tunnels leave by the other port (``config.src_mac``, ``config.dst_mac``: the next hop)."""

    def on_ports(self, macs: PortMacs) -> L4lbTraffic:
        src, dst = macs.out_of("b" if self.ingress == "a" else "a")
        return dataclasses.replace(self, macs=macs, config=dataclasses.replace(self.config, src_mac=src, dst_mac=dst))

    def __post_init__(self) -> None:
        if self.proto not in PROTOCOLS:
            raise ConfigError("proto", self.proto, PROTOCOLS)
        if not 1 <= self.vips <= L4LB_MAX_VIPS:
            raise ConfigError("vips", self.vips, f"1 .. {L4LB_MAX_VIPS}")
        if not 0 <= self.reals or self.reals * self.vips > MAX_REALS_TOTAL:
            raise ConfigError("reals", self.reals, f"0 .. {MAX_REALS_TOTAL // self.vips} (with {self.vips} VIPs)")
        if not 1 <= self.flows <= CLIENT_POOL or self.flows % self.targets:
            raise ConfigError("flows", self.flows, f"1 .. {CLIENT_POOL}; above vips ({self.vips}), a multiple of it")
        if not self.min_frame_size <= self.frame_size <= FRAME_MAX:
            raise ConfigError("frame_size", self.frame_size,
                              f"{self.min_frame_size} .. {FRAME_MAX} bytes for {self.proto.upper()} "
                              "with signature")

    # -- what the LB is configured with -------------------------------------------------------------
    def vip(self, v: int) -> Vip:
        return Vip(int2ip(VIP_BASE + v), VIP_PORT[self.proto], self.proto, mss_clamp=self.mss_clamp)

    def real_addrs(self, v: int) -> tuple[str, ...]:
        """The reals of VIP ``v``: 198.19.16.1 upwards, ``reals`` each, VIP after VIP."""
        return tuple(int2ip(REAL_BASE + v * self.reals + r) for r in range(self.reals))

    @property
    def targets(self) -> int:
        """VIPs the flows reach: ``vips``, or ``flows`` when there are fewer flows than VIPs."""
        return min(self.vips, self.flows)

    def pools(self) -> dict[Vip, Pool]:
        """Every VIP with its reals (what ``L4lb.add_vip`` installs and the model takes)."""
        return dict(self._pools)

    @functools.cached_property
    def _pools(self) -> dict[Vip, Pool]:
        return {self.vip(v): Pool(self.real_addrs(v)) for v in range(self.vips)}

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def l4_len(self) -> int:
        return 8 if self.proto == "udp" else 20

    @property
    def min_frame_size(self) -> int:
        return max(64, 14 + 20 + self.l4_len + SIGNATURE.size + FCS_LEN)

    # -- packets -------------------------------------------------------------------------------------
    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The client frame of ``flow`` (without FCS), with a signature."""
        i = flow % self.flows
        vip = self.vip(i % self.vips)
        sport = (SPORT_BASE + i) & 0xFFFF
        l4 = (UDP(sport=sport, dport=vip.port, chksum=0) if self.proto == "udp"
              else TCP(sport=sport, dport=vip.port, flags="A", seq=1, ack=1, window=65535))
        src, dst = self.macs.into(self.ingress)
        hdr = (Ether(src=src, dst=dst) /
               IP(src=int2ip(CLIENT_BASE + i), dst=vip.addr, id=0, flags="DF", ttl=64) / l4)
        pad = self.frame_size - FCS_LEN - len(hdr) - SIGNATURE.size
        return bytes(hdr / Raw(SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts) + b"\0" * pad))

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct LB emits for ``packet(flow, ...)`` (the reference model's answer)."""
        return emit(self.packet(flow, seq, stream, ts), self.config, self.pools()).out or b""

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """The variation that walks the flows: variable 0 (the flow number) is written into the client
        address and source port; when the flows reach several VIPs, variable 1 (0 .. targets - 1)
        into the destination address. Both step together, so with ``inc``/``dec`` packet n is
        ``packet(n % flows)`` (targets divides flows); with ``random`` every frame is a valid client
        packet, its VIP drawn independently of its client. The IPv4 checksum and TCP's (its pseudo-header covers the
        addresses) are kept valid; UDP sends no checksum."""
        ip, l4 = 14, 34
        end = self.frame_size - FCS_LEN
        csums = [ip + 10] + ([l4 + 16] if self.proto == "tcp" else [])
        covers = [[(ip, l4)]] + ([[(ip + 12, ip + 20), (l4, end)]] if self.proto == "tcp" else [])
        writes: list[tuple[str, int, int, int]] = []
        if self.flows > 1:
            writes = [("ip.src", ip + 12, 4, CLIENT_BASE), ("l4.sport", l4, 2, SPORT_BASE)]
        fe = flow_engine(writes, self.flows, csums, covers, l4 + self.l4_len, flow_op, l3_offset=ip,
                         l4_offset=l4 if self.proto == "tcp" else -1)
        if self.targets == 1:
            return fe
        dst = FieldWrite("ip.dst", ip + 16, 4, 1, VIP_BASE, csum_mask(covers, ip + 16, 4))
        return dataclasses.replace(fe, vars=fe.vars + (FlowVar(flow_op, 0, self.targets - 1),),
                                   writes=fe.writes + (dst,))
