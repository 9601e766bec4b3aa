"""TRex STL profile: perfkit's PGW-U traffic (seed 001), self-contained for TRex's own environment.

    trex> start -f trex_profiles/pgwu.py --port 0 -m 1mpps -t frame_size=64,flows=1000
    trex> start -f trex_profiles/pgwu.py --port 1 -m 1mpps -t dir=dl,frame_size=512
    trex> start -f trex_profiles/pgwu.py --port 0 -t --frame_size 1424 --vlan 1     (argparse tunables)
    perfkit trial --dataplane pgwu --direction ul --trex-profile trex_profiles/pgwu.py -t flows=1000 --rate 1Mpps

It imports only TRex's API (``trex.stl.api``, with TRex's own scapy) and builds the frames byte for
byte as perfkit's traffic profile does (``perfkit.dataplanes.pgwu.traffic.PgwuTraffic.packet(i)``
for flow i, sessions laid out as ``perfkit.dataplanes.pgwu.control.SessionPlan``; the tests check
both against each other through TRex's ``STLProfile.load_py``):

- uplink: ``Ether / [Dot1Q 10] / IPv4(SGW -> 198.19.255.1) / UDP(2152, 2152, csum 0) /
  GTP-U(G-PDU, TEID) / IPv4(UE -> 198.19.255.130, DF, ttl 64) / UDP(sport, 5001, csum 0) / payload``;
- downlink: ``Ether / [Dot1Q tenant] / IPv4(198.19.255.130 -> UE, DF, ttl 64) / UDP / payload``;

the payload opens with perfkit's signature (stream 0, sequence 0: its generator fills them in).
Flow i is session i: UE ``i mod U`` of tenant ``i mod T``. The field engine walks the flows with
``STLVmFlowVar`` variables (one tenant: the flow number; several: the UE index and the tenant,
stepping together), writes the TEID, UE address, source port, tenant VLAN and SGW address with
``STLVmWrFlowVar`` / ``STLVmWrMaskFlowVar``, and fixes the IPv4 checksums with ``STLVmFixIpv4``.
Tunables are in ``TUNABLES``; the direction follows the port (even ports uplink) unless ``dir``
says otherwise.
"""
from __future__ import annotations

import argparse
import math
import struct

from trex.stl.api import (STLFlowLatencyStats, STLPktBuilder, STLProfile, STLScVmRaw, STLStream, STLTXCont,
                          STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar, STLVmWrMaskFlowVar)

try:  # TRex's choice of destination MAC: the packet's (older clients lack the constant)
    from trex.stl.api import STLStreamDstMAC_PKT
except ImportError:  # pragma: no cover
    STLStreamDstMAC_PKT = 1

# -- perfkit's layout (perfkit/dataplanes/pgwu/control.py, traffic.py, perfkit/testbed/topology.py) ----
UE_BASE = 0xC6120000            # 198.18.0.0
UE_POOL = 2 * 65536 - 512       # UE addresses per tenant
SGW_BASE = 0xC613FE01           # 198.19.254.1
SGW_COUNT = 100
UL_TEID_BASE = 0x10000000
TENANT_VLAN_BASE = 100
SEED_TENANTS = 1000
TEID_UE_BITS = 16
SERVER_ADDR = 0xC613FF82        # 198.19.255.130
GTPU_ADDR = 0xC613FF01          # 198.19.255.1, the DUT's S5 port
S5_VLAN = 10
SPORT_BASE = 10000
DPORT = 5001
MACS = {"a": "02:00:00:00:01:01", "p0": "02:00:00:00:01:02", "b": "02:00:00:00:02:01", "p1": "02:00:00:00:02:02"}
SIGNATURE = b"PK" + bytes(10)   # magic 0x4b50, stream 0, sequence 0, time 0 (little-endian)
FCS = 4

#: name -> (type, default, help). ``dir`` also accepts TRex's own ``direction`` (0/1 = port parity).
TUNABLES = {
    "dir": (str, None, "ul or dl (default: by port parity, even ports ul)"),
    "frame_size": (int, 64, "user-side frame size with FCS [bytes]; uplink frames are 36 (+4 tagged) longer"),
    "flows": (int, 1, "distinct sessions the stream walks through (1, or every session when they span tenants)"),
    "sessions": (int, 0, "sessions installed in the DUT (0: as many as flows); over 130560: 1000 tenants, vlan=1"),
    "vlan": (int, 0, "1: 802.1Q on both sides (S5 VLAN 10, one SGi VLAN per tenant), as the DUT is configured"),
    "udp_csum": (int, 0, "1: the DUT computes the outer UDP checksum on encapsulation (changes no offered frame)"),
    "flow_op": (str, "inc", "inc, dec or random: how the flow variables walk the flows"),
    "pps": (float, 1000.0, "base rate [packets/s]; the console's -m scales it"),
    "latency_pg_id": (int, -1, "pg_id of an STLFlowLatencyStats stream of flow 0 (-1: none)"),
    "latency_pps": (float, 1000.0, "rate of the latency stream [packets/s], taken out of pps"),
    "packet_macs": (int, 1, "1: send the profile's MACs; 0: the port's (L2/L3 mode)"),
}


def parse_tunables(words: list[str]) -> dict:
    """Argparse-style tunables (``-t --flows 1000 --dir dl``); ``-`` and ``_`` are the same."""
    parser = argparse.ArgumentParser(prog="pgwu.py", description=__doc__.splitlines()[0])
    for name, (kind, _, help_) in TUNABLES.items():
        flags = {f"--{name}", f"--{name.replace('_', '-')}"} | ({"--direction"} if name == "dir" else set())
        parser.add_argument(*sorted(flags), dest=name, type=kind, default=argparse.SUPPRESS, help=help_)
    return vars(parser.parse_args(words))


# -- bytes ---------------------------------------------------------------------------------------------
def mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def ipv4(src: int, dst: int, payload_len: int, proto: int, flags: int) -> bytes:
    """An IPv4 header (id 0, ttl 64) with its checksum."""
    hdr = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + payload_len, 0, flags, 64, proto, 0, src, dst)
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]


def ue_count(count: int, tenants: int) -> int:
    """UE addresses per tenant: the fewest, coprime to ``tenants``, that hold ``count`` sessions."""
    ues = -(-count // tenants)
    while math.gcd(ues, tenants) != 1:
        ues += 1
    return ues


class Plan:
    """perfkit's session plan: session i is UE ``i mod U`` of tenant ``i mod T``."""

    def __init__(self, count: int, tagged: bool):
        self.count, self.tagged = count, tagged
        self.tenants = 1 if count <= UE_POOL else SEED_TENANTS
        if self.tenants > 1 and not tagged:
            raise ValueError(f"sessions={count}: more than {UE_POOL} need tenant VLANs (vlan=1)")
        self.ues = ue_count(count, self.tenants)

    def session(self, i: int) -> dict:
        ue, tenant = i % self.ues, i % self.tenants
        return {"teid": UL_TEID_BASE + (tenant << TEID_UE_BITS) + ue, "ue": UE_BASE + ue,
                "sgw": SGW_BASE + i % SGW_COUNT, "vlan": (TENANT_VLAN_BASE + tenant) if self.tagged else 0}


def frame(direction: str, frame_size: int, s: dict, s5_vlan: int) -> tuple[bytes, dict]:
    """Flow 0's frame and the offsets of the fields the field engine writes."""
    inner_len = frame_size - FCS - 14
    if inner_len < 20 + 8 + len(SIGNATURE):
        raise ValueError(f"frame_size={frame_size}: at least {14 + 20 + 8 + len(SIGNATURE) + FCS} bytes")
    src, dst = (s["ue"], SERVER_ADDR) if direction == "ul" else (SERVER_ADDR, s["ue"])
    sport = (SPORT_BASE + s["ue"] - UE_BASE) & 0xFFFF
    payload = SIGNATURE + bytes(inner_len - 28 - len(SIGNATURE))
    inner = ipv4(src, dst, 8 + len(payload), 17, 0x4000) + struct.pack("!HHHH", sport, DPORT, 8 + len(payload), 0) + payload
    if direction == "dl":
        l2 = mac(MACS["b"]) + mac(MACS["p1"])
        l2 += struct.pack("!HHH", 0x8100, s["vlan"], 0x0800) if s["vlan"] else struct.pack("!H", 0x0800)
        return l2 + inner, {"inner_ip": len(l2), "vlan": 14 if s["vlan"] else None}
    l2 = mac(MACS["a"]) + mac(MACS["p0"])
    l2 += struct.pack("!HHH", 0x8100, s5_vlan, 0x0800) if s5_vlan else struct.pack("!H", 0x0800)
    gtp = struct.pack("!BBHI", 0x30, 0xFF, len(inner), s["teid"])
    udp = struct.pack("!HHHH", 2152, 2152, 8 + len(gtp) + len(inner), 0)
    outer = ipv4(s["sgw"], GTPU_ADDR, len(udp) + len(gtp) + len(inner), 17, 0)
    head = l2 + outer + udp + gtp
    return head + inner, {"outer_ip": len(l2), "teid": len(head) - 4, "inner_ip": len(head)}


def field_engine(direction: str, flows: int, plan: Plan, off: dict, op: str) -> list:
    """The STL VM that turns flow 0's frame into flow i's, i = 0, 1, ... (perfkit's walk)."""
    if flows == 1:
        return []
    ip, sport = off["inner_ip"], off["inner_ip"] + 20
    ins: list = []
    if plan.tenants == 1:  # one variable: the flow number (= the UE index)
        ue = tenant = "flow"
        ins.append(STLVmFlowVar(name="flow", min_value=0, max_value=flows - 1, size=4, op=op))
    else:  # two variables stepping together: UE index (wraps at U) and tenant (wraps at T)
        if flows != plan.count or plan.count != plan.ues * plan.tenants:
            raise ValueError(f"flows={flows}: 1 or every session ({plan.ues * plan.tenants}) over {plan.tenants} tenants")
        ue, tenant = "ue", "tenant"
        ins += [STLVmFlowVar(name="ue", min_value=0, max_value=plan.ues - 1, size=4, op=op),
                STLVmFlowVar(name="tenant", min_value=0, max_value=plan.tenants - 1, size=2, op=op)]
    if direction == "ul":
        if plan.tenants == 1:
            ins.append(STLVmWrFlowVar(fv_name=ue, pkt_offset=off["teid"], add_val=UL_TEID_BASE))
        else:  # TEID = base + tenant << 16 + UE: its two 16-bit halves
            ins += [STLVmWrFlowVar(fv_name=tenant, pkt_offset=off["teid"], add_val=UL_TEID_BASE >> TEID_UE_BITS),
                    STLVmWrMaskFlowVar(fv_name=ue, pkt_offset=off["teid"] + 2, pkt_cast_size=2, mask=0xFFFF,
                                       add_value=UL_TEID_BASE & 0xFFFF)]
        ins.append(STLVmWrFlowVar(fv_name=ue, pkt_offset=ip + 12, add_val=UE_BASE))
    else:
        ins.append(STLVmWrFlowVar(fv_name=ue, pkt_offset=ip + 16, add_val=UE_BASE))
        if plan.tenants > 1:
            ins.append(STLVmWrFlowVar(fv_name=tenant, pkt_offset=off["vlan"], add_val=TENANT_VLAN_BASE))
    ins.append(STLVmWrMaskFlowVar(fv_name=ue, pkt_offset=sport, pkt_cast_size=2, mask=0xFFFF, add_value=SPORT_BASE))
    ins.append(STLVmFixIpv4(offset=ip))
    if direction == "ul":  # the SGW address of session i (the PGW-U does not look at it)
        ins += [STLVmFlowVar(name="sgw", min_value=0, max_value=min(flows, SGW_COUNT) - 1, size=4, op=op),
                STLVmWrFlowVar(fv_name="sgw", pkt_offset=off["outer_ip"] + 12, add_val=SGW_BASE),
                STLVmFixIpv4(offset=off["outer_ip"])]
    return ins


class STLS1:
    """perfkit's PGW-U streams for one TRex port."""

    def get_streams(self, direction: int | str = 0, port_id: int = 0, tunables: list | None = None, **kw) -> list:
        """TRex calls this with ``direction`` (port parity), ``port_id`` and either the ``-t`` values as
        keywords (older consoles) or ``tunables``, the ``-t`` words for argparse (newer ones)."""
        opts = {name: default for name, (_, default, _) in TUNABLES.items()}
        unknown = sorted(set(kw) - set(TUNABLES))
        if unknown:
            raise ValueError(f"unknown tunable {unknown[0]!r}; known: {', '.join(TUNABLES)}")
        opts.update(kw)
        opts.update(parse_tunables([str(t) for t in tunables or []]))
        opts = {name: kind(opts[name]) if opts[name] is not None else None for name, (kind, _, _) in TUNABLES.items()}
        way = str(opts["dir"] if opts["dir"] is not None else direction).lower()
        way = {"0": "ul", "1": "dl"}.get(way, way)
        if way not in ("ul", "dl"):
            raise ValueError(f"dir={opts['dir']}: ul or dl")
        if opts["flow_op"] not in ("inc", "dec", "random"):
            raise ValueError(f"flow_op={opts['flow_op']}: inc, dec or random")
        flows, vlan = opts["flows"], bool(opts["vlan"])
        plan = Plan(max(opts["sessions"], flows), vlan)
        if flows < 1:
            raise ValueError(f"flows={flows}: at least 1")
        first, off = frame(way, opts["frame_size"], plan.session(0), S5_VLAN if vlan else 0)
        vm = field_engine(way, flows, plan, off, opts["flow_op"])
        macs = {"mac_src_override_by_pkt": True, "mac_dst_override_mode": STLStreamDstMAC_PKT} if opts["packet_macs"] else {}
        pps = opts["pps"]
        streams = []
        if opts["latency_pg_id"] >= 0:
            lat = min(opts["latency_pps"], pps * 0.1)
            pps -= lat
            streams.append(STLStream(name="latency", packet=STLPktBuilder(pkt_buffer=first), mode=STLTXCont(pps=lat),
                                     flow_stats=STLFlowLatencyStats(pg_id=opts["latency_pg_id"]), **macs))
        streams.insert(0, STLStream(name=f"pgwu-{way}", packet=STLPktBuilder(pkt_buffer=first, vm=STLScVmRaw(vm)),
                                    mode=STLTXCont(pps=pps), **macs))
        return streams


def register() -> STLS1:
    return STLS1()


__all__ = ["STLProfile", "STLS1", "register"]
