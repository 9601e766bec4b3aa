"""A reference model of the L4 load balancer in plain Python: what ``bpf/l4lb.bpf.c`` must do with a
frame.

It follows the specification (seeds 000 and 004, Katran's behaviour) independently of the C code,
so tests compare the kernel's verdict and output bytes with it, and trials check captured tunnel
frames with ``check_output``. The rules, in order:

1. shorter than Ethernet: ``drop_truncated``; not IPv4 (ARP, IPv6, VLAN-tagged ...): ``pass``;
2. IPv4 header cut short: ``drop_truncated``; version != 4 or IHL < 5 or total length < IHL:
   ``drop_bad_header``; total length past the frame: ``drop_truncated``;
3. not TCP/UDP: ``pass``; a fragment: ``pass`` if to the LB's own address, else ``drop_fragment``;
   L4 header (UDP 8, TCP 20 bytes) not inside the IP packet: ``drop_truncated``;
4. no VIP for (destination, destination port, protocol): ``pass``;
5. ``egress_mtu`` set and total length + 20 above it: with DF an ICMP frag-needed goes back to the
   client (``icmp_frag_needed``, XDP_TX), without DF ``drop_too_big``;
6. a TCP SYN to a VIP with ``mss_clamp``: an MSS option above the egress MTU (1500 when
   unchecked) - 60 is lowered to it, the TCP checksum updated (RFC 1624); options are walked as
   RFC 9293 lays them out (EOL ends them, NOP is one byte, any other kind has a length >= 2), the
   first ``OPTIONS_WALKED`` only (every stack sends MSS first); a malformed list, or a TCP header
   past the IP packet, is left alone;
7. VIP without reals: ``drop_no_real``; else IPIP to the real Maglev picks for the flow's hash
   (``fwd``): Ethernet padding removed, outer header lb_addr -> real, TOS and DF of the inner
   header, id 0, TTL 64.
"""
from __future__ import annotations

import struct
from typing import Mapping, Sequence

from perfkit.checksum import csum, ones_sum
from perfkit.dataplane import Emitted
from perfkit.dataplanes.l4lb.config import ENCAP_LEN, L4lbConfig, Vip
from perfkit.dataplanes.l4lb.hashing import flow_slot
from perfkit.dataplanes.l4lb.layouts import L4LB_DEFAULT_MTU
from perfkit.dataplanes.l4lb.maglev import Pool
from perfkit.layouts import ETH_P_IP, IP_DF, IP_MF, IP_OFFSET, IPPROTO_IPIP, IPPROTO_TCP, IPPROTO_UDP
from perfkit.netaddr import int2ip, ip2int, mac_bytes

L4_MIN = {IPPROTO_TCP: 20, IPPROTO_UDP: 8}
TCP_SYN = 0x02
#: Options walked looking for the MSS (NOPs count); an MSS after them is left alone.
OPTIONS_WALKED = 10
#: ICMP errors: precedence "internetwork control" (RFC 1812 4.3.2.5, as Linux), TTL 64.
ICMP_TOS, ICMP_TTL = 0xC0, 64

Vips = Mapping[Vip, "Pool | Sequence[str]"]


def ipv4_header(tos: int, tot_len: int, frag: int, ttl: int, proto: int, src: bytes, dst: bytes) -> bytes:
    """An option-less IPv4 header (id 0) with its checksum."""
    h = struct.pack("!BBHHHBBH4s4s", 0x45, tos, tot_len, 0, frag, ttl, proto, 0, src, dst)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def pool_of(value: Pool | Sequence[str]) -> Pool:
    return value if isinstance(value, Pool) else Pool(tuple(value))


def emit(frame: bytes, config: L4lbConfig, vips: Vips) -> Emitted:
    """What the load balancer does with ``frame`` (no FCS) given its configuration and VIPs
    (each VIP's reals as a ``Pool`` or a list of addresses)."""
    f = frame
    drop = lambda why: Emitted("XDP_DROP", why)  # noqa: E731
    if len(f) < 14:
        return drop("drop_truncated")
    if struct.unpack_from("!H", f, 12)[0] != ETH_P_IP:
        return Emitted("XDP_PASS", "pass")
    off = 14
    if len(f) < off + 20:
        return drop("drop_truncated")
    ver_ihl, tos, tot_len, _id, frag, _ttl, proto = struct.unpack_from("!BBHHHBB", f, off)
    ihl = (ver_ihl & 0xF) * 4
    if ver_ihl >> 4 != 4 or ihl < 20 or tot_len < ihl:
        return drop("drop_bad_header")
    if off + tot_len > len(f):
        return drop("drop_truncated")
    if proto not in L4_MIN:
        return Emitted("XDP_PASS", "pass")
    saddr, daddr = f[off + 12:off + 16], f[off + 16:off + 20]
    if frag & (IP_MF | IP_OFFSET):
        return Emitted("XDP_PASS", "pass") if int2ip(int.from_bytes(daddr, "big")) == config.lb_addr \
            else drop("drop_fragment")
    if ihl + L4_MIN[proto] > tot_len:
        return drop("drop_truncated")
    sport, dport = struct.unpack_from("!HH", f, off + ihl)
    vip = Vip(int2ip(int.from_bytes(daddr, "big")), dport, "tcp" if proto == IPPROTO_TCP else "udp")
    if vip not in vips:
        return Emitted("XDP_PASS", "pass")
    if config.egress_mtu and tot_len + ENCAP_LEN > config.egress_mtu:
        if not frag & IP_DF:
            return drop("drop_too_big")
        return Emitted("XDP_TX", "icmp_frag_needed", frag_needed(f, config.egress_mtu - ENCAP_LEN))
    options = next(v for v in vips if v == vip)
    if options.mss_clamp and proto == IPPROTO_TCP:
        f = clamp_mss(f, off + ihl, tot_len - ihl, config.egress_mtu or L4LB_DEFAULT_MTU)
    pool = pool_of(vips[vip])
    real = pool.real(flow_slot(int.from_bytes(saddr, "big"), int.from_bytes(daddr, "big"), sport, dport, proto,
                               pool.size))
    if real is None:
        return drop("drop_no_real")
    outer = ipv4_header(tos, tot_len + ENCAP_LEN, frag & IP_DF, 64, IPPROTO_IPIP, ip_bytes(config.lb_addr), ip_bytes(real))
    out = mac_bytes(config.dst_mac) + mac_bytes(config.src_mac) + struct.pack("!H", ETH_P_IP) + outer
    return Emitted("XDP_TX" if config.xdp_tx else "XDP_REDIRECT", "fwd", out + f[off:off + tot_len])


def clamp_mss(frame: bytes, tcp: int, seg_len: int, mtu: int) -> bytes:
    """``frame`` with the MSS option of the TCP SYN at offset ``tcp`` (``seg_len`` bytes of TCP)
    lowered to ``mtu`` - IPIP - IPv4 - TCP headers, or as it is."""
    clamp = mtu - ENCAP_LEN - 40
    flags, doff = frame[tcp + 13], frame[tcp + 12] >> 4
    if not flags & TCP_SYN or doff * 4 > seg_len:
        return frame
    opts = frame[tcp + 20:tcp + doff * 4]
    i = 0
    for _ in range(OPTIONS_WALKED):
        if i >= len(opts) or opts[i] == 0:          # 0: end of the option list
            return frame
        if opts[i] == 1:                            # no-operation
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2 or i + opts[i + 1] > len(opts):
            return frame                            # malformed: left alone
        if opts[i] == 2:                            # MSS
            if opts[i + 1] != 4:
                return frame
            old = int.from_bytes(opts[i + 2:i + 4], "big")
            if old <= clamp:
                return frame
            at = tcp + 20 + i + 2
            out = bytearray(frame)
            out[at:at + 2] = clamp.to_bytes(2, "big")
            # RFC 1624 eqn. 3 over the 16-bit words of the segment: at an odd offset the value's bytes
            # fall into two words, each as the other byte of its word
            swap = (lambda v: (v >> 8) | ((v & 0xFF) << 8)) if (at - tcp) % 2 else (lambda v: v)
            check = struct.unpack_from("!H", frame, tcp + 16)[0]
            total = (~check & 0xFFFF) + (~swap(old) & 0xFFFF) + swap(clamp)
            total = (total & 0xFFFF) + (total >> 16)
            total = (total & 0xFFFF) + (total >> 16)
            struct.pack_into("!H", out, tcp + 16, ~total & 0xFFFF)
            return bytes(out)
        i += opts[i + 1]
    return frame


def ip_bytes(addr: str) -> bytes:
    return ip2int(addr).to_bytes(4, "big")


def frag_needed(frame: bytes, mtu: int) -> bytes:
    """RFC 792/1191 destination unreachable, fragmentation needed, for the IPv4 packet of
    ``frame``: back to its sender from the address it was sent to, quoting its header and first 8
    payload bytes, next-hop MTU ``mtu``."""
    ip = frame[14:]
    ihl = (ip[0] & 0xF) * 4
    quote = ip[:ihl + 8]
    icmp = struct.pack("!BBHHH", 3, 4, 0, 0, mtu) + quote
    icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
    hdr = ipv4_header(ICMP_TOS, 20 + len(icmp), 0, ICMP_TTL, 1, ip[16:20], ip[12:16])
    return frame[6:12] + frame[0:6] + struct.pack("!H", ETH_P_IP) + hdr + icmp


#: Names of the tunnel frame's bytes, for check_output's messages.
_FIELDS = [(0, 6, "eth.dst"), (6, 12, "eth.src"), (12, 14, "eth.type"), (14, 15, "outer.version/ihl"),
           (15, 16, "outer.tos"), (16, 18, "outer.tot_len"), (18, 20, "outer.id"), (20, 22, "outer.frag_off"),
           (22, 23, "outer.ttl"), (23, 24, "outer.protocol"), (24, 26, "outer.check"), (26, 30, "outer.src")]


def check_output(frame: bytes, config: L4lbConfig, vips: Vips) -> str | None:
    """None when ``frame`` (captured after the LB) is the correct tunnel frame for the client packet
    it carries: outer Ethernet and IPv4 fields, checksum, and the real Maglev picks for the inner
    5-tuple. Otherwise one line naming the first difference."""
    if len(frame) < 34 + 20:
        return f"frame of {len(frame)} bytes is too short for Ethernet + IPIP + IPv4"
    inner = frame[34:]
    client = mac_bytes(config.src_mac) + mac_bytes(config.dst_mac) + struct.pack("!H", ETH_P_IP) + inner
    want = emit(client, config, vips)
    if want.stat != "fwd":
        return f"the inner packet would not be forwarded ({want.stat})"
    assert want.out is not None
    if frame == want.out:
        return None
    if frame[30:34] != want.out[30:34]:
        return (f"outer.dst {int2ip(int.from_bytes(frame[30:34], 'big'))}: Maglev picks "
                f"{int2ip(int.from_bytes(want.out[30:34], 'big'))} for this flow")
    if ones_sum(frame[14:34]) != 0xFFFF:
        return f"outer.check 0x{struct.unpack_from('!H', frame, 24)[0]:04x} is not a valid IPv4 header checksum"
    for lo, hi, name in _FIELDS:
        if frame[lo:hi] != want.out[lo:hi]:
            return f"{name} is {frame[lo:hi].hex()}, expected {want.out[lo:hi].hex()}"
    if len(frame) != len(want.out):
        return f"frame is {len(frame)} bytes, expected {len(want.out)}"
    first = next(i for i in range(len(frame)) if frame[i] != want.out[i])
    return f"inner byte {first - 34} differs"
