"""PGW-U traffic profiles: the packets a trial offers, built with scapy, and how they vary per
packet (``perfkit.stl.fieldengine``).

Frames (seed 001), ``frame_size`` = user-side frame with FCS, without tag:

- UL: ``Ether / [Dot1Q s5_vlan] / IP(sgw -> gtpu_addr) / UDP(2152, 2152, chksum=0) /
  GTP_U_Header(teid) / IP(ue -> server) / UDP|TCP / signature / padding``;
- DL: ``Ether / [Dot1Q tenant] / IP(server -> ue) / UDP|TCP / signature / padding``;
- host: ``Ether / [Dot1Q s5_vlan] / IP(sgw -> gtpu_addr) / UDP(sport, HOST_PORT, checksummed) /
  signature / padding``: UDP to the PGW-U's own address that is not GTP-U, which it passes to its
  kernel (XDP_PASS), for a socket there (``to_socket``). The UDP checksum is a real one, because GRO
  aggregates no datagram without one.

Flow f is session f of the plan (``SessionPlan``: UE ``f mod U`` of tenant ``f mod T``), with inner
source port ``SPORT_BASE + UE index`` (16 bits). With several tenants the generator walks the
sessions with two variables, the UE index (wrapping at U) and the tenant (wrapping at T), that
step together: U and T are coprime, so flows 0 .. U*T-1 meet every session once.
"""
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, Raw

from perfkit.dataplane import PortMacs, Traffic
from perfkit.dataplanes.pgwu.control import TEID_UE_BITS, UE_BASE, UL_TEID_BASE, PgwuConfig, Session, SessionPlan
from perfkit.dataplanes.pgwu.layouts import GTPU_PORT
from perfkit.dataplanes.pgwu.model import emit
from perfkit.errors import ConfigError
from perfkit.netaddr import ip2int
from perfkit.stl.fieldengine import FLOW_OPS, FieldEngine, FieldWrite, FlowVar, csum_mask, flow_engine
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.units import FCS_LEN, FRAME_MAX

SERVER_ADDR = "198.19.255.130"
S5_VLAN = 10
INNER_L4 = ("udp", "tcp")
GTPU_OVERHEAD = 36
SPORT_BASE = 10000
#: The UDP port of the socket that ``host`` traffic is delivered to (discard, RFC 863).
HOST_PORT = 9
DIRECTIONS = ("ul", "dl", "host")


@dataclass(frozen=True)
class PgwuTraffic(Traffic):
    """The traffic of one PGW-U scenario: direction, sizes, flows and how GTP-U headers look."""

    direction: str = "ul"
    frame_size: int = 64
    flows: int = 1
    plan: SessionPlan = field(default_factory=SessionPlan)
    config: PgwuConfig = field(default_factory=PgwuConfig)
    vlan: bool = False
    """802.1Q on both sides: S5 VLAN ``S5_VLAN`` and one SGi VLAN per tenant."""
    session_table: str = "hash"
    """The DUT's session tables' design (the ``session_table`` build option)."""
    inner_l4: str = "udp"
    gtp_seq: bool = False
    """Uplink G-PDUs carry a sequence number (S flag)."""
    gtp_ext: bool = False
    """Uplink G-PDUs carry a PDU session container extension header (E flag, 5G N3 style)."""

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ConfigError("direction", self.direction, DIRECTIONS)
        if self.direction == "host" and (self.vlan or self.plan.tagged):
            raise ConfigError("vlan", True, "off with direction host: the DUT's kernel has no VLAN port, so it "
                              "would drop every tagged frame passed to it")
        if self.inner_l4 not in INNER_L4:
            raise ConfigError("inner_l4", self.inner_l4, INNER_L4)
        if self.flows < 1 or self.flows > self.plan.count:
            raise ConfigError("flows", self.flows, f"1 .. sessions ({self.plan.count})")
        tenants = self.plan.tenant_count
        if tenants > 1 and self.flows > 1:  # the generator walks the whole (UE, tenant) grid or one flow
            if self.flows != self.plan.count:
                raise ConfigError("flows", self.flows, f"1 or every session ({self.plan.count}) when sessions "
                                  f"span several tenants ({tenants} SGi VLANs)")
            if not self.plan.full:
                near = " or ".join(str(n) for n in self.plan.full_counts_near())
                raise ConfigError("sessions", self.plan.count,
                                  f"{tenants} tenants x U UE addresses, U coprime to {tenants}, when flows walk "
                                  f"every session of several tenants ({near})")
        if self.frame_size < self.min_frame_size:
            raise ConfigError("frame_size", self.frame_size,
                              f">= {self.min_frame_size} bytes for inner {self.inner_l4.upper()} with signature")
        if self.frame_size > FRAME_MAX:
            raise ConfigError("frame_size", self.frame_size, f"<= {FRAME_MAX} bytes")

    @classmethod
    def for_params(cls, frame_size: int, flows: int, params: Mapping[str, Any], config: PgwuConfig | None = None,
                   **kw: Any) -> PgwuTraffic:
        """The traffic of a scenario with validated PGW-U ``params`` (direction, sessions, udp_csum, vlan)."""
        vlan = bool(params["vlan"])
        plan = SessionPlan(count=max(int(params["sessions"]), flows), tagged=vlan)
        cfg = config or PgwuConfig(s5_vlan=S5_VLAN if vlan else 0, udp_csum=bool(params["udp_csum"]))
        cfg = dataclasses.replace(cfg, teid_stride=plan.teid_stride)
        return cls(direction=params["direction"], frame_size=frame_size, flows=flows, plan=plan, config=cfg,
                   vlan=vlan, session_table=str(params.get("session_table", "hash")), **kw)

    @property
    def ingress(self) -> str:  # type: ignore[override]
        """Uplink (and host traffic) enters the DUT at its S5 port (``a``), downlink at its SGi port (``b``)."""
        return "b" if self.direction == "dl" else "a"

    @property
    def to_socket(self) -> tuple[str, int] | None:
        """Host traffic goes to a UDP socket at the PGW-U's GTP-U address, port ``HOST_PORT``."""
        return (self.config.gtpu_addr, HOST_PORT) if self.direction == "host" else None

    def on_ports(self, macs: PortMacs) -> PgwuTraffic:
        """S5 is the DUT's port ``a`` (its peer the tester's ``p0``), SGi its ``b`` (peer ``p1``)."""
        return dataclasses.replace(self, config=dataclasses.replace(
            self.config, s5_src_mac=macs.a, s5_dst_mac=macs.p0, sgi_src_mac=macs.b, sgi_dst_mac=macs.p1))

    # -- sizes -----------------------------------------------------------------------------------
    @property
    def min_frame_size(self) -> int:
        l4 = 8 if self.inner_l4 == "udp" else 20
        return max(64, 14 + 20 + l4 + SIGNATURE.size + FCS_LEN)

    @property
    def inner_len(self) -> int:
        """Length of the inner (user) IPv4 packet [bytes]."""
        return self.frame_size - FCS_LEN - 14

    # -- packets ---------------------------------------------------------------------------------
    def session(self, flow: int) -> Session:
        return self.plan.session(flow % self.flows)

    def inner(self, flow: int, seq: int = 0, stream: int = 0, ts: int = 0) -> Packet:
        """The user packet of ``flow`` (inner IPv4), padded to the frame size, with a signature."""
        s = self.session(flow)
        src, dst = (s.ue_addr, SERVER_ADDR) if self.direction == "ul" else (SERVER_ADDR, s.ue_addr)
        sport = (SPORT_BASE + ip2int(s.ue_addr) - UE_BASE) & 0xFFFF  # as the field engine writes it
        l4 = (UDP(sport=sport, dport=5001, chksum=0) if self.inner_l4 == "udp"
              else TCP(sport=sport, dport=80, flags="A", seq=1, ack=1, window=65535))
        hdr = IP(src=src, dst=dst, id=0, flags="DF", ttl=64) / l4
        pad = self.inner_len - len(hdr) - SIGNATURE.size
        sig = SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts)
        return IP(bytes(hdr / Raw(sig + b"\0" * pad)))

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The frame the generator offers for ``flow`` (without FCS)."""
        s = self.session(flow)
        cfg = self.config
        if self.direction == "host":
            return self._host_packet(flow, seq, stream, ts)
        inner = self.inner(flow, seq, stream, ts)
        if self.direction == "dl":
            l2 = Ether(src=cfg.sgi_dst_mac, dst=cfg.sgi_src_mac)
            if s.tenant_vlan:
                l2 = l2 / Dot1Q(vlan=s.tenant_vlan)
            return bytes(l2 / inner)
        l2 = Ether(src=cfg.s5_dst_mac, dst=cfg.s5_src_mac)
        if cfg.s5_vlan:
            l2 = l2 / Dot1Q(vlan=cfg.s5_vlan)
        gtp = GTP_U_Header(teid=s.ul_teid, gtp_type=255)
        if self.gtp_seq:
            gtp.S, gtp.seq = 1, seq & 0xFFFF
        if self.gtp_ext:
            gtp.E, gtp.next_ex = 1, 0x85
            gtp = gtp / GTPPDUSessionContainer(type=1, QFI=9)
        outer = IP(src=s.sgw_addr, dst=cfg.gtpu_addr, id=0, ttl=64) / UDP(sport=GTPU_PORT, dport=GTPU_PORT, chksum=0)
        return bytes(l2 / outer / gtp / inner)

    def _host_packet(self, flow: int, seq: int, stream: int, ts: int) -> bytes:
        cfg = self.config
        l2 = Ether(src=cfg.s5_dst_mac, dst=cfg.s5_src_mac)
        if cfg.s5_vlan:
            l2 = l2 / Dot1Q(vlan=cfg.s5_vlan)
        sport = (SPORT_BASE + flow % self.flows) & 0xFFFF  # as the field engine writes it
        hdr = IP(src=self.session(0).sgw_addr, dst=cfg.gtpu_addr, id=0, flags="DF", ttl=64) / UDP(sport=sport, dport=HOST_PORT)
        pad = self.inner_len - len(hdr) - SIGNATURE.size
        sig = SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts)
        return bytes(l2 / IP(bytes(hdr / Raw(sig + b"\0" * pad))))

    # -- per-packet variation --------------------------------------------------------------------
    def offsets(self) -> dict[str, int]:
        """Byte offsets in ``packet()`` of the inner IPv4 header, inner L4 header and signature."""
        frame = self.packet(0)
        inner = len(frame) - self.inner_len
        ihl = (frame[inner] & 0xF) * 4
        l4 = inner + ihl
        sig = l4 + (8 if self.inner_l4 == "udp" else (frame[l4 + 12] >> 4) * 4)
        out = {"inner_ip": inner, "inner_l4": l4, "signature": sig}
        if self.direction == "ul":
            out["gtp"] = frame.index(struct.pack("!I", self.session(0).ul_teid)) - 4
        return out

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """The variation that walks the ``flows`` flows: flow i is ``packet(i)`` (uplink: but for the
        outer source address, which stays flow 0's SGW; the PGW-U does not look at it).

        One tenant: one variable, the flow number (= the UE index), is written into every field that
        names the flow: the TEID and UE source address uplink, the UE destination address downlink,
        and the source port. Several tenants (flows = every session): two variables step together,
        the UE index u (0 .. U-1) and the tenant t (0 .. T-1); u gives the UE address, the source port
        and the TEID's low half, t the TEID's high half (uplink) or the tenant's VLAN id (downlink).
        The inner IPv4 checksum (and TCP's, which covers the addresses) are fixed up.
        """
        off = self.offsets()
        ip, l4 = off["inner_ip"], off["inner_l4"]
        if self.direction == "host":  # flows are source ports; the UDP checksum covers them and the signature
            writes = [("udp.sport", l4, 2, SPORT_BASE)] if self.flows > 1 else []
            return flow_engine(writes, self.flows, [l4 + 6], [[(l4, len(self.packet(0)))]], off["signature"],
                               flow_op, l3_offset=ip, l4_offset=l4)
        csums = [ip + 10] + ([l4 + 16] if self.inner_l4 == "tcp" else [])
        # checksum i covers these byte ranges (TCP: pseudo-header addresses and the segment)
        covers = [[(ip, l4)]] + ([[(ip + 12, ip + 20), (l4, len(self.packet(0)))]] if self.inner_l4 == "tcp" else [])
        if self.flows == 1 or self.plan.tenant_count == 1:
            writes: list[tuple[str, int, int, int]] = []
            if self.flows > 1:
                if self.direction == "ul":
                    writes += [("gtp.teid", off["gtp"] + 4, 4, UL_TEID_BASE), ("inner.src", ip + 12, 4, UE_BASE)]
                else:
                    writes += [("inner.dst", ip + 16, 4, UE_BASE)]
                writes.append(("inner.sport", l4, 2, SPORT_BASE))
            return flow_engine(writes, self.flows, csums, covers, off["signature"], flow_op, l3_offset=ip, l4_offset=l4)
        if flow_op not in FLOW_OPS:
            raise ConfigError("flow_op", flow_op, FLOW_OPS)
        if not (self.flows == self.plan.count and self.plan.full):  # __post_init__ refuses it
            raise ConfigError("flows", self.flows, f"1 or every session ({self.plan.count})")
        ue, tenant = 0, 1  # the variables
        low = (1 << TEID_UE_BITS) - 1
        if self.direction == "ul":
            teid = off["gtp"] + 4
            grid = [("gtp.teid[tenant]", teid, 2, tenant, UL_TEID_BASE >> TEID_UE_BITS),
                    ("gtp.teid[ue]", teid + 2, 2, ue, UL_TEID_BASE & low), ("inner.src", ip + 12, 4, ue, UE_BASE)]
        else:
            tci = struct.unpack_from("!H", self.packet(0), 14)[0]  # tenant 0's tag: its PCP and DEI bits stay
            grid = [("inner.dst", ip + 16, 4, ue, UE_BASE), ("sgi.vlan", 14, 2, tenant, tci)]
        grid.append(("inner.sport", l4, 2, ue, SPORT_BASE))
        variables = (FlowVar(flow_op, 0, self.plan.ue_count - 1), FlowVar(flow_op, 0, self.plan.tenant_count - 1))
        fws = tuple(FieldWrite(n, o, sz, var, add, csum_mask(covers, o, sz)) for n, o, sz, var, add in grid)
        return FieldEngine(variables, fws, tuple(csums), off["signature"],
                           csum_mask(covers, off["signature"], SIGNATURE.size), l3_offset=ip, l4_offset=l4)

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct PGW-U emits for ``packet(flow, ...)`` (the reference model's answer)."""
        return emit(self.packet(flow, seq, stream, ts), self.config, self.plan).out or b""
