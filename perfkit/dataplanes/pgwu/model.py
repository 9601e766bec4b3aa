"""A reference model of the PGW-U in plain Python: what ``bpf/pgwu.bpf.c`` must do with a frame.

It follows the same specification (seed 001 and the foundation issue) independently of the C code,
so tests compare the kernel's verdict and output bytes with it (differential testing), and trials
use it to check captured packets (``check_output``).
"""
from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from typing import Iterable

from perfkit.checksum import csum as _csum
from perfkit.dataplane import Emitted
from perfkit.dataplanes.pgwu.control import PgwuConfig, Session, SessionPlan
from perfkit.dataplanes.pgwu.layouts import GTPU_PORT
from perfkit.layouts import ETH_P_8021Q, ETH_P_IP, IP_MF, IP_OFFSET, IPPROTO_UDP


class _Sessions:
    """Lookups over a SessionPlan (arithmetic) or an explicit list of sessions."""

    def __init__(self, sessions: SessionPlan | Iterable[Session]):
        self.plan = sessions if isinstance(sessions, SessionPlan) else None
        if self.plan is None:
            lst = list(sessions)
            self.ul = {s.ul_teid: s for s in lst}
            self.dl = {(s.ue_addr, s.tenant_vlan): s for s in lst}

    def by_teid(self, teid: int) -> Session | None:
        return self.plan.by_ul_teid(teid) if self.plan else self.ul.get(teid)

    def by_ue(self, ue: str, vlan: int) -> Session | None:
        return self.plan.by_dl_key(ue, vlan) if self.plan else self.dl.get((ue, vlan))


def _ip(b: bytes) -> str:
    if len(b) != 4:
        raise ValueError(f"an IPv4 address is 4 bytes, not {len(b)}")
    return socket.inet_ntoa(b)


@functools.lru_cache(maxsize=1024)
def _packed(addr: str) -> bytes:
    return ipaddress.IPv4Address(addr).packed


@functools.lru_cache(maxsize=64)
def _mac(m: str) -> bytes:
    return bytes(int(x, 16) for x in m.split(":"))


def _l2(dst: str, src: str, vlan: int) -> bytes:
    if vlan:
        return _mac(dst) + _mac(src) + struct.pack("!HHH", ETH_P_8021Q, vlan & 0xFFF, ETH_P_IP)
    return _mac(dst) + _mac(src) + struct.pack("!H", ETH_P_IP)


def _forward(cfg: PgwuConfig, stat: str, out: bytes) -> Emitted:
    return Emitted("XDP_TX" if cfg.xdp_tx else "XDP_REDIRECT", stat, out)


def emit(frame: bytes, cfg: PgwuConfig, sessions: SessionPlan | Iterable[Session]) -> Emitted:
    """What the PGW-U does with ``frame`` (no FCS) given its configuration and sessions."""
    return _emit(frame, cfg, _Sessions(sessions))


def _emit(f: bytes, cfg: PgwuConfig, sess: _Sessions) -> Emitted:
    drop = lambda why: Emitted("XDP_DROP", why)  # noqa: E731
    if len(f) < 14:
        return drop("drop_truncated")
    proto, off, vlan = struct.unpack_from("!H", f, 12)[0], 14, 0
    if proto == ETH_P_8021Q:
        if len(f) < 18:
            return drop("drop_truncated")
        vlan = struct.unpack_from("!H", f, 14)[0] & 0xFFF
        proto, off = struct.unpack_from("!H", f, 16)[0], 18
    if proto != ETH_P_IP:
        return Emitted("XDP_PASS", "pass")
    if len(f) < off + 20:
        return drop("drop_truncated")
    ver_ihl, tos, tot_len, _id, frag, _ttl, l4proto = struct.unpack_from("!BBHHHBB", f, off)
    daddr = _ip(f[off + 16:off + 20])
    if ver_ihl >> 4 != 4 or ver_ihl & 0xF < 5:
        return drop("drop_bad_header")
    ihl = (ver_ihl & 0xF) * 4
    if tot_len < ihl:  # before the length check: a header longer than its packet is bad, cut or not
        return drop("drop_bad_header")
    if off + tot_len > len(f):
        return drop("drop_truncated")
    l4 = off + ihl
    if l4proto == IPPROTO_UDP and (cfg.gtpu_addr in ("0.0.0.0", daddr)):
        if len(f) < l4 + 8:
            return drop("drop_truncated")
        dport, udp_len = struct.unpack_from("!HH", f, l4 + 2)
        if dport == GTPU_PORT:
            if frag & (IP_MF | IP_OFFSET):
                return drop("drop_fragment")
            if udp_len < 8 or udp_len > tot_len - ihl:
                return drop("drop_bad_header")
            return _uplink(f, l4 + 8, udp_len - 8, cfg, sess)
    if daddr in (cfg.gtpu_addr, cfg.sgi_addr):
        return Emitted("XDP_PASS", "pass")
    return _downlink(f, off, tos, tot_len, daddr, vlan, cfg, sess)


def _uplink(f: bytes, g: int, udp_payload: int, cfg: PgwuConfig, sess: _Sessions) -> Emitted:
    drop = lambda why: Emitted("XDP_DROP", why)  # noqa: E731
    if len(f) < g + 8:
        return drop("drop_truncated")
    flags, mtype, gtp_len, teid = struct.unpack_from("!BBHI", f, g)
    if flags >> 5 != 1 or not flags & 0x10:
        return drop("drop_gtp_version")
    if mtype != 255:
        return Emitted("XDP_PASS", "pass")
    if gtp_len + 8 > udp_payload:
        return drop("drop_bad_header")
    pos = g + 8
    if flags & 0x07:
        if len(f) < pos + 4:
            return drop("drop_truncated")
        nxt = f[pos + 3] if flags & 0x04 else 0
        pos += 4
        for _ in range(4):
            if not nxt:
                break
            if len(f) < pos + 1:
                return drop("drop_truncated")
            if f[pos] == 0:
                return drop("drop_gtp_ext")
            end = pos + f[pos] * 4
            if len(f) < end:
                return drop("drop_truncated")
            nxt, pos = f[end - 1], end
        if nxt:
            return drop("drop_gtp_ext")
    extra = pos - (g + 8)
    if extra > gtp_len:
        return drop("drop_bad_header")
    if len(f) < pos + 1:
        return drop("drop_inner_truncated")
    if f[pos] >> 4 != 4:
        return drop("drop_inner_not_ipv4")
    if len(f) < pos + 20:
        return drop("drop_inner_truncated")
    inner_ihl = (f[pos] & 0xF)
    inner_len = struct.unpack_from("!H", f, pos + 2)[0]
    avail = len(f) - pos
    if inner_ihl < 5 or inner_len < inner_ihl * 4 or inner_len > gtp_len - extra or inner_len > avail:
        return drop("drop_inner_truncated")
    s = sess.by_teid(teid)
    if s is None:
        return drop("drop_unknown_teid")
    if _ip(f[pos + 12:pos + 16]) != s.ue_addr:
        return drop("drop_ue_mismatch")
    out = _l2(cfg.sgi_dst_mac, cfg.sgi_src_mac, s.tenant_vlan) + f[pos:pos + inner_len]
    return _forward(cfg, "ul_fwd", out)


def _downlink(f: bytes, off: int, tos: int, tot_len: int, daddr: str, vlan: int, cfg: PgwuConfig,
              sess: _Sessions) -> Emitted:
    s = sess.by_ue(daddr, vlan)
    if s is None:
        return Emitted("XDP_DROP", "drop_dl_no_session")
    if cfg.s5_mtu and tot_len + 36 > cfg.s5_mtu:
        return Emitted("XDP_DROP", "drop_too_big")
    inner = f[off:off + tot_len]
    src = _packed(cfg.gtpu_addr)
    dst = _packed(s.sgw_addr)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, tot_len + 36, 0, 0, 64, 17, 0, src, dst))
    struct.pack_into("!H", ip, 10, _csum(bytes(ip)))
    udp_len = tot_len + 16
    gtp = struct.pack("!BBHI", 0x30, 255, tot_len, s.dl_teid)
    check = 0
    if cfg.udp_csum:
        pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
        check = _csum(pseudo + struct.pack("!HHHH", GTPU_PORT, GTPU_PORT, udp_len, 0) + gtp + inner) or 0xFFFF
    udp = struct.pack("!HHHH", GTPU_PORT, GTPU_PORT, udp_len, check)
    out = _l2(cfg.s5_dst_mac, cfg.s5_src_mac, cfg.s5_vlan) + bytes(ip) + udp + gtp + inner
    return _forward(cfg, "dl_fwd", out)


def check_output(frame: bytes, direction: str, cfg: PgwuConfig,
                 sessions: SessionPlan | Iterable[Session]) -> str | None:
    """Is ``frame`` what the PGW-U emits for some packet of the profile? None if so, else why not.

    The input that would produce it is rebuilt from the output (the inner packet and its session)
    and run through the model; the result must equal ``frame`` byte for byte.
    """
    idx = _Sessions(sessions)
    try:
        if direction == "ul":
            inner, vlan = _strip_l2(frame)
            ue = _ip(inner[12:16])
            s = idx.by_ue(ue, vlan)
            if s is None:
                return f"no session for UE {ue} in VLAN {vlan}"
            gtp_in = (_l2(cfg.s5_src_mac, cfg.s5_dst_mac, cfg.s5_vlan)
                      + _ipv4_udp_gtp(s.sgw_addr, cfg.gtpu_addr, s.ul_teid, inner))
            want = _emit(gtp_in, cfg, idx)
        else:
            outer, _ = _strip_l2(frame)
            if len(outer) < 36 or outer[9] != 17:
                return "not a GTP-U packet"
            teid = struct.unpack_from("!I", outer, 32)[0]
            inner = outer[36:]
            ue = _ip(inner[16:20]) if len(inner) >= 20 else "?"
            s = _by_dl_teid(idx, ue, teid)
            if s is None:
                return f"TEID {teid:#x} is not the session TEID of UE {ue}"
            dl_in = _l2(cfg.sgi_src_mac, cfg.sgi_dst_mac, s.tenant_vlan) + inner
            want = _emit(dl_in, cfg, idx)
    except (struct.error, IndexError, ValueError) as err:
        return f"unparseable frame: {err}"
    if want.out is None:
        return f"the model drops the rebuilt input ({want.stat})"
    if want.out != frame:
        return _first_difference(frame, want.out)
    return None


def _strip_l2(frame: bytes) -> tuple[bytes, int]:
    proto = struct.unpack_from("!H", frame, 12)[0]
    if proto == ETH_P_8021Q:
        return frame[18:], struct.unpack_from("!H", frame, 14)[0] & 0xFFF
    return frame[14:], 0


def _by_dl_teid(idx: _Sessions, ue: str, teid: int) -> Session | None:
    """The session of UE ``ue`` whose downlink TEID is ``teid`` (a plan: arithmetic, whatever its tenants)."""
    if idx.plan is None:
        return next((s for (addr, _), s in idx.dl.items() if addr == ue and s.dl_teid == teid), None)
    s = idx.plan.by_dl_teid(teid)
    return s if s is not None and s.ue_addr == ue else None


def _ipv4_udp_gtp(src: str, dst: str, teid: int, inner: bytes) -> bytes:
    n = len(inner)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, n + 36, 0, 0, 64, 17, 0,
                               ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed))
    struct.pack_into("!H", ip, 10, _csum(bytes(ip)))
    return bytes(ip) + struct.pack("!HHHH", GTPU_PORT, GTPU_PORT, n + 16, 0) + \
        struct.pack("!BBHI", 0x30, 255, n, teid) + inner


def _first_difference(got: bytes, want: bytes) -> str:
    if len(got) != len(want):
        return f"length {len(got)} != expected {len(want)}"
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"byte {i}: {got[i]:#04x} != expected {want[i]:#04x}"
