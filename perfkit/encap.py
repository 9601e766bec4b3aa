"""Protocol knowledge as data: the tunnels a dataplane's frames carry (``Encap``) and what its packets
are spread over DUT cores by (``Steering``), declared as header fields (offsets, lengths, flag bits)
that generic code reads without knowing any protocol by name.

- the sink (``bpf/sink.bpf.c``) walks through every declared tunnel to the signature in the
  innermost UDP or TCP payload; ``innermost_l4`` is the same walk in Python (the signature's place
  in a TRex profile's frames, ``perfkit.testbed.stlgen``), both after ``bpf/include/encap.h``;
- the steering program (``bpf/steer.bpf.c``) hashes the words a dataplane's ``Steering`` names.

A dataplane declares them (``Dataplane.encaps``, ``Dataplane.steering``); ``perfkit.dataplanes.
encapsulations()`` gathers every dataplane's tunnels. Adding a tunnel is a declaration, not code.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from perfkit.errors import ConfigError
from perfkit.layouts import (ENCAP_MAX, ENCAP_MAX_EXT, ETH_P_8021Q, ETH_P_IP, IPPROTO_TCP, IPPROTO_UDP, STEER_MAX_WORDS,
                             EncapInner, SteerAt, encap, encap_table, steer_config)
from perfkit.units import ETH_HLEN

UDP_HLEN, TCP_HLEN = 8, 20
#: IPv4 headers a frame may nest (the outer one and one per tunnel): the sink's limit too.
MAX_TUNNELS = 2


@dataclass(frozen=True)
class Encap:
    """A tunnel: announced by the outer IPv4 protocol (and, over UDP, the destination port), with a
    fixed header, an optional part that flag bits of the header announce, and an optional chain of
    extension headers (each gives its length in ``ext_unit``-byte units in its first byte, the next
    one's type in its last; type 0 ends the chain)."""

    name: str
    """For people: the tunnel's name, e.g. ``VXLAN``."""
    ip_proto: int
    """The outer IPv4 protocol that announces it (4 for IP in IP, 17 for a tunnel over UDP)."""
    udp_dport: int = 0
    """Over UDP: the destination port that announces it; else 0."""
    header_len: int = 0
    """Its fixed header after the outer IPv4 header, or after the UDP header over UDP [bytes]."""
    inner: str = "ipv4"
    """What follows it: ``ipv4`` (an IPv4 packet), or ``ether`` (an Ethernet frame with at most one
    VLAN tag, then IPv4)."""
    flags_offset: int = 0
    """The byte of its header whose bits announce the optional parts."""
    opt_mask: int = 0
    """Bits of that byte that, any of them set, announce ``opt_len`` more bytes (0: none)."""
    opt_len: int = 0
    """Bytes of the optional part [bytes]."""
    ext_mask: int = 0
    """Bits of that byte that announce the chain of extension headers (0: none); the first one's
    type is byte ``ext_type_offset`` of the header (within the optional part)."""
    ext_type_offset: int = 0
    ext_unit: int = 4
    """Bytes per unit of an extension header's length [bytes]."""
    scapy_layer: str = ""
    """The module that binds scapy's dissection of this tunnel, if scapy's own layers do not (e.g.
    a ``scapy.contrib`` module): imported where frames are dissected through tunnels."""

    def __post_init__(self) -> None:
        if self.inner not in ("ipv4", "ether"):
            raise ConfigError(f"{self.name} inner", self.inner, "ipv4 or ether")
        if not 0 < self.ip_proto < 256:
            raise ConfigError(f"{self.name} ip_proto", self.ip_proto, "1 .. 255 (the IPv4 header's next-header byte)")
        if not 0 <= self.udp_dport < 1 << 16 or bool(self.udp_dport) != (self.ip_proto == IPPROTO_UDP):
            raise ConfigError(f"{self.name} udp_dport", self.udp_dport, "a port 1 .. 65535 over UDP, else 0")
        for name in ("header_len", "flags_offset", "opt_mask", "opt_len", "ext_mask", "ext_type_offset", "ext_unit"):
            if not 0 <= getattr(self, name) < 256:
                raise ConfigError(f"{self.name} {name}", getattr(self, name), "0 .. 255")
        if (self.opt_mask or self.ext_mask) and self.flags_offset >= self.header_len:
            raise ConfigError(f"{self.name} flags_offset", self.flags_offset, f"< header_len ({self.header_len})")
        if self.ext_mask and not self.header_len <= self.ext_type_offset < self.header_len + self.opt_len:
            raise ConfigError(f"{self.name} ext_type_offset", self.ext_type_offset, "a byte of the optional part")

    def announced_by(self, ip_proto: int, udp_dport: int) -> bool:
        return ip_proto == self.ip_proto and (ip_proto != IPPROTO_UDP or udp_dport == self.udp_dport)

    def payload(self, frame: bytes, pos: int) -> int | None:
        """Where the inner packet of the tunnel header at ``pos`` begins (as ``encap_skip``), or None
        when the header runs past the frame or its extension chain is broken."""
        end = pos + self.header_len
        if end > len(frame):
            return None
        flags = frame[pos + self.flags_offset] if self.opt_mask or self.ext_mask else 0
        if not flags & self.opt_mask:
            return end
        end += self.opt_len
        if end > len(frame):
            return None
        nxt = frame[pos + self.ext_type_offset] if flags & self.ext_mask else 0
        for _ in range(ENCAP_MAX_EXT):
            if not nxt:
                return end
            if end >= len(frame) or not frame[end]:
                return None
            end += frame[end] * self.ext_unit
            if end > len(frame):
                return None
            nxt = frame[end - 1]
        return None if nxt else end

    def to_struct(self) -> encap:
        return encap(udp_dport=struct.unpack("=H", struct.pack("!H", self.udp_dport))[0], ip_proto=self.ip_proto,
                     inner=EncapInner[f"ENCAP_INNER_{self.inner.upper()}"], hdr_len=self.header_len,
                     flags_off=self.flags_offset, opt_mask=self.opt_mask, opt_len=self.opt_len,
                     ext_mask=self.ext_mask, ext_type_off=self.ext_type_offset, ext_unit=self.ext_unit)


def encap_struct(encaps: tuple[Encap, ...]) -> encap_table:
    """The table the sink walks (``struct encap_table``)."""
    if len(encaps) > ENCAP_MAX:
        raise ConfigError("tunnels", [e.name for e in encaps], f"at most {ENCAP_MAX} (ENCAP_MAX)")
    table = encap_table(n=len(encaps))
    for i, e in enumerate(encaps):
        table.encaps[i] = e.to_struct()
    return table


def innermost_l4(frame: bytes, encaps: tuple[Encap, ...]) -> tuple[int, int, int] | None:
    """(L4 header offset, protocol, payload offset) of the innermost UDP or TCP header, walked as
    ``bpf/sink.bpf.c`` walks: one VLAN tag, IPv4, then up to ``MAX_TUNNELS`` of ``encaps``; None for
    anything else."""
    pos = _ipv4_after_ether(frame, 0)
    for depth in range(MAX_TUNNELS + 1):
        if pos is None or len(frame) < pos + 20 or frame[pos] >> 4 != 4 or frame[pos] & 0xF < 5:
            return None
        proto, l4 = frame[pos + 9], pos + (frame[pos] & 0xF) * 4
        if l4 > len(frame):
            return None
        dport, after = 0, l4
        if proto == IPPROTO_UDP:
            if len(frame) < l4 + UDP_HLEN:
                return None
            dport, after = struct.unpack_from("!H", frame, l4 + 2)[0], l4 + UDP_HLEN
        tunnel = next((e for e in encaps if e.announced_by(proto, dport)), None) if depth < MAX_TUNNELS else None
        if tunnel is None:
            if proto == IPPROTO_UDP:
                return l4, proto, after
            if proto == IPPROTO_TCP and len(frame) >= l4 + TCP_HLEN and frame[l4 + 12] >> 4 >= 5:
                return l4, proto, l4 + (frame[l4 + 12] >> 4) * 4
            return None
        pos = tunnel.payload(frame, after)
        if pos is not None and tunnel.inner == "ether":
            pos = _ipv4_after_ether(frame, pos)
    return None


def _ipv4_after_ether(frame: bytes, pos: int) -> int | None:
    """Where the IPv4 header behind the Ethernet header at ``pos`` (and at most one VLAN tag) begins."""
    if len(frame) < pos + ETH_HLEN:
        return None
    ethertype, pos = struct.unpack_from("!H", frame, pos + 12)[0], pos + ETH_HLEN
    if ethertype == ETH_P_8021Q:
        if len(frame) < pos + 4:
            return None
        ethertype, pos = struct.unpack_from("!H", frame, pos + 2)[0], pos + 4
    return pos if ethertype == ETH_P_IP else None


@dataclass(frozen=True)
class Word:
    """A 32-bit word of a packet the steering program hashes, as loaded (network order)."""

    at: str
    """Where it is: ``ip`` (the outer IPv4 header), ``l4`` (the TCP or UDP header behind it; no
    word for other protocols) or ``tunnel`` (the header of ``Steering.tunnel``)."""
    offset: int
    """Bytes from there [bytes]."""
    mul: int = 1
    """The key is the XOR of every word times its multiplier."""

    def __post_init__(self) -> None:
        if self.at not in ("ip", "l4", "tunnel"):
            raise ConfigError("steering word at", self.at, "ip, l4 or tunnel")
        if not 0 <= self.offset <= 252 or not 0 < self.mul < 1 << 32:
            raise ConfigError("steering word", (self.offset, self.mul), "offset 0 .. 252, multiplier 1 .. 2**32 - 1")


@dataclass(frozen=True)
class Steering:
    """How ``bpf/steer.bpf.c`` spreads a dataplane's packets over several DUT cores: a hash of some
    words of each packet, chosen so that the packets of one flow (or bearer) always land on one core
    (no reordering). A packet that carries ``tunnel`` is hashed on the ``tunnel`` words alone (a
    tunnel's outer addresses and ports are the same for all its flows), any other on the rest."""

    words: tuple[Word, ...]
    tunnel: Encap | None = None

    def __post_init__(self) -> None:
        if not self.words or len(self.words) > STEER_MAX_WORDS:
            raise ConfigError("steering words", len(self.words), f"1 .. {STEER_MAX_WORDS}")
        if any(w.at == "tunnel" for w in self.words) != (self.tunnel is not None):
            raise ConfigError("steering tunnel", self.tunnel, "a tunnel exactly when a word is at the tunnel")

    def cpu_of(self, frame: bytes, cpus: list[int]) -> int | None:
        """The CPU of ``cpus`` the steering program sends ``frame`` to (its hash, in Python), or None
        when it hands the frame to the host (not IPv4)."""
        ip = _ipv4_after_ether(frame, 0)
        if ip is None or len(frame) < ip + 20 or frame[ip] >> 4 != 4 or frame[ip] & 0xF < 5 \
                or len(frame) < ip + (frame[ip] & 0xF) * 4:
            return None
        proto, after_ip = frame[ip + 9], ip + (frame[ip] & 0xF) * 4
        l4 = after_ip if proto in (IPPROTO_TCP, IPPROTO_UDP) and len(frame) >= after_ip + UDP_HLEN else None
        dport = struct.unpack_from("!H", frame, l4 + 2)[0] if l4 is not None else 0
        tun = None
        if self.tunnel is not None and proto == self.tunnel.ip_proto and (
                proto != IPPROTO_UDP or (l4 is not None and dport == self.tunnel.udp_dport)):
            tun = after_ip + UDP_HLEN if proto == IPPROTO_UDP else after_ip
        key, tun_key = 0, 0
        for w in self.words:
            base = {"ip": ip, "l4": l4, "tunnel": tun}[w.at]
            if base is None or len(frame) < base + w.offset + 4:
                if w.at == "tunnel":
                    tun = None
                continue
            word = struct.unpack_from("=I", frame, base + w.offset)[0] * w.mul & 0xFFFFFFFF
            if w.at == "tunnel":
                tun_key ^= word
            else:
                key ^= word
        if tun is not None:
            key = tun_key
        return cpus[((key * 2654435761) & 0xFFFFFFFF) * len(cpus) >> 32]

    def to_struct(self, cpus: list[int]) -> steer_config:
        """The steering program's configuration for ``cpus`` (its .rodata)."""
        cfg = steer_config(ncpus=len(cpus), nwords=len(self.words))
        for i, c in enumerate(cpus):
            cfg.cpus[i] = c
        for i, w in enumerate(self.words):
            cfg.words[i].at, cfg.words[i].offset, cfg.words[i].mul = SteerAt[f"STEER_AT_{w.at.upper()}"], w.offset, w.mul
        if self.tunnel is not None:
            cfg.tunnel = self.tunnel.to_struct()
        return cfg


#: The IPv4 destination address.
BY_DADDR = Steering((Word("ip", 16),))
#: A flow: the IPv4 destination and source addresses and, for TCP and UDP, the ports.
BY_FLOW = Steering((Word("ip", 16), Word("ip", 12, 31), Word("l4", 0)))
