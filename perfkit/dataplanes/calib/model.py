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

from perfkit.dataplane import Emitted
from perfkit.dataplanes.calib.control import CalibConfig
from perfkit.dataplanes.calib.layouts import CalibStat
from perfkit.layouts import ETH_P_IP
from perfkit.netaddr import mac_bytes

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
