"""A reference model of the calibrated DUT in plain Python: what ``bpf/calib.bpf.c`` must do with a
frame. The rules, in order:

1. not IPv4 (ARP, IPv6, VLAN-tagged ...): ``pass``;
2. shorter than Ethernet + a 20-byte IPv4 header: ``drop_truncated`` (nothing else of the IPv4
   header is checked: the DUT is a wire with a known cost, not a router);
3. no egress port configured: ``drop_no_egress``;
4. else, after ``work`` iterations of work that leave no trace in the frame: with ``drop_every``
   N, the Nth such packet of a CPU (its ``seq``-th: every N-th) is dropped (``drop_every``);
5. else the frame, its Ethernet destination and source rewritten to the configured next hop and
   egress port, byte for byte otherwise (padding and all), redirected to the egress port
   (``calib_fwd``).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from perfkit.dataplane import Emitted
from perfkit.dataplanes.calib.control import CalibConfig
from perfkit.dataplanes.calib.layouts import CalibStat
from perfkit.netaddr import mac_bytes
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC

if TYPE_CHECKING:
    from perfkit.dataplanes.calib.traffic import CalibTraffic

ETH_P_IP = 0x0800
FWD = CalibStat.CALIB_FWD.label
DROP_EVERY = CalibStat.CALIB_DROP_EVERY.label


def emit(frame: bytes, config: CalibConfig, seq: int = 1) -> Emitted:
    """What the calibrated DUT configured with ``config`` does with ``frame`` (no FCS), the
    ``seq``-th packet its CPU works on (1: the first; it matters only with ``drop_every``)."""
    if len(frame) < 14:
        return Emitted("XDP_DROP", "drop_truncated")
    if struct.unpack_from("!H", frame, 12)[0] != ETH_P_IP:
        return Emitted("XDP_PASS", "pass")
    if len(frame) < 14 + 20:
        return Emitted("XDP_DROP", "drop_truncated")
    if not config.egress_ifindex:
        return Emitted("XDP_DROP", "drop_no_egress")
    if config.drop_every and seq % config.drop_every == 0:
        return Emitted("XDP_DROP", DROP_EVERY)
    return Emitted("XDP_REDIRECT", FWD, mac_bytes(config.dst_mac) + mac_bytes(config.src_mac) + frame[12:])


def check_output(frame: bytes, traffic: CalibTraffic) -> str | None:
    """None when ``frame`` (captured after the DUT) is what it emits for some packet of ``traffic``:
    the flow is read from the UDP source port and the signature from its place, the offered packet
    rebuilt with them and run through the model; the result must equal ``frame`` byte for byte.
    Otherwise one line naming the first difference."""
    from perfkit.dataplanes.calib.traffic import L4_OFF, SIG_OFF, SPORT_BASE

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
_FIELDS = [(0, 6, "eth.dst"), (6, 12, "eth.src"), (12, 14, "eth.type"), (14, 34, "ipv4 header"),
           (34, 42, "udp header"), (42, 42 + SIGNATURE.size, "signature")]


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
