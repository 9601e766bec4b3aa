"""IP addresses for the local testbed: a TRex profile's frames as the testbed may send them.

Traffic on this machine uses only 198.18.0.0/15 (RFC 2544) and 2001:2::/48 (RFC 5180). TRex's
example profiles use others (16.0.0.x -> 48.0.0.x), so before the local generator sends a profile,
every IPv4 and IPv6 header of every stream's frame (found by scapy's dissection, MPLS, VLAN, QinQ,
GRE, VXLAN and the dataplanes' tunnels included) has its addresses outside those ranges mapped into them:

- IPv4: a source to 198.18.x.y, a destination to 198.19.x.y, keeping the low 16 bits (x.y);
- IPv6: a source to 2001:2:0:0::/64, a destination to 2001:2:0:1::/64, keeping the low 64 bits;
- addresses already inside are kept.

The checksums that were right for the original frame (IPv4 header, UDP, TCP, ICMP, ICMPv6, inner
first) are recomputed; a wrong one stays wrong. The field engine's writes are translated with them:
a write that touches only the kept low bits needs nothing; a write of a whole IPv4 address (4 bytes,
big-endian, at the address) whose values (min..max + add_value) share their high 16 bits gets the
constant ``(target_high - high) << 16`` added to its ``add_value`` (mod 2^32), so packet n carries
TRex's n-th address with its high 16 bits replaced; values all inside the range are kept. For IPv6
an 8-byte write of the high 64 bits is translated only when it writes one value. Any other write
into the high bits is refused in one line (``ConfigError``).
"""
from __future__ import annotations

import importlib
import ipaddress
import struct
from dataclasses import dataclass, replace
from typing import Any

from perfkit.errors import ConfigError
from perfkit.stl.profile import Instr, StlProfile, StlStream
from perfkit.stl.vm import Checksum, ipv4_checksum, l4_checksum

#: The ranges the testbed may send.
PERMITTED = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:2::/48"))
#: IPv4: the high 16 bits of mapped sources and destinations (198.18, 198.19), the low bits kept.
V4_SRC, V4_DST, V4_KEEP = 0xC612, 0xC613, 16
#: IPv6: the high 64 bits of mapped sources and destinations (2001:2:0:0, 2001:2:0:1).
V6_SRC, V6_DST, V6_KEEP = 0x2001_0002_0000_0000, 0x2001_0002_0000_0001, 64


@dataclass(frozen=True)
class AddressField:
    """An IPv4 or IPv6 address in a frame."""

    offset: int
    """Its first byte in the frame."""
    version: int
    """4 or 6."""
    role: str
    """src or dst."""

    @property
    def size(self) -> int:
        """Bytes."""
        return 4 if self.version == 4 else 16

    @property
    def keep(self) -> int:
        """Low bits kept by the mapping."""
        return V4_KEEP if self.version == 4 else V6_KEEP

    @property
    def high_end(self) -> int:
        """End of the high bits the mapping replaces [byte offset, exclusive]."""
        return self.offset + (self.size * 8 - self.keep) // 8

    @property
    def target(self) -> int:
        """The high bits a mapped address gets."""
        if self.version == 4:
            return V4_SRC if self.role == "src" else V4_DST
        return V6_SRC if self.role == "src" else V6_DST

    def label(self) -> str:
        return f"IPv{self.version} {self.role} at byte {self.offset}"


@dataclass(frozen=True, order=True)
class Mapping:
    """One prefix mapped for the testbed: ``original`` high bits -> ``target`` high bits."""

    version: int
    original: int
    target: int

    def __str__(self) -> str:
        keep = V4_KEEP if self.version == 4 else V6_KEEP
        bits = 32 if self.version == 4 else 128
        net = (lambda h: ipaddress.ip_network((h << keep, bits - keep)))
        return f"{net(self.original)} -> {net(self.target)}"


# -- finding headers ---------------------------------------------------------------------------------
def _scapy_layers() -> None:
    """The layers TRex profiles build with, bound so that dissection walks through them: MPLS
    (EtherType 0x8847, the IP behind the last label), scapy's own (VLAN, QinQ, GRE, VXLAN, IPv6
    extension headers ...) and the tunnels the dataplanes declare (``Encap.scapy_layer``)."""
    from perfkit import dataplanes
    tunnels = [e.scapy_layer for e in dataplanes.encapsulations() if e.scapy_layer]
    for name in ("scapy.layers.all", "scapy.contrib.mpls", *tunnels):
        importlib.import_module(name)


def headers(frame: bytes) -> list[tuple[Any, int]]:
    """(scapy layer, offset) of every header scapy finds in the Ethernet ``frame``, outermost first."""
    _scapy_layers()
    from scapy.layers.l2 import Ether
    from scapy.packet import NoPayload, Padding, Raw

    out: list[tuple[Any, int]] = []
    layer, off = Ether(frame), 0
    while not isinstance(layer, (NoPayload, Raw, Padding)):
        size = len(layer.self_build())
        if size <= 0 or off + size > len(frame):
            break
        out.append((layer, off))
        off += size
        layer = layer.payload
    return out


def address_fields(frame: bytes) -> list[AddressField]:
    """Every IPv4 and IPv6 source and destination in ``frame`` (inside tunnels and MPLS too)."""
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6

    out: list[AddressField] = []
    for layer, off in headers(frame):
        if isinstance(layer, IP):
            out += [AddressField(off + 12, 4, "src"), AddressField(off + 16, 4, "dst")]
        elif isinstance(layer, IPv6):
            out += [AddressField(off + 8, 6, "src"), AddressField(off + 24, 6, "dst")]
    return out


def frame_checksums(frame: bytes) -> list[Checksum]:
    """The IPv4 header, UDP, TCP, ICMP and ICMPv6 checksums of ``frame`` whose coverage scapy finds."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.inet6 import IPv6, _ICMPv6

    out: list[Checksum] = []
    l3: tuple[int, int] | None = None  # (offset, version) of the IP header the next L4 belongs to
    for layer, off in headers(frame):
        if isinstance(layer, IP):
            out.append(ipv4_checksum(frame, off))
            l3 = (off, 4)
        elif isinstance(layer, IPv6):
            l3 = (off, 6)
        elif l3 is not None and (type(layer) in (UDP, TCP) or isinstance(layer, _ICMPv6)):
            proto = 17 if type(layer) is UDP else 6 if type(layer) is TCP else 58
            out.append(l4_checksum(frame, l3[0], off, proto))
            l3 = None
        elif l3 is not None and type(layer) is ICMP:
            end = min(len(frame), l3[0] + struct.unpack_from("!H", frame, l3[0] + 2)[0])
            out.append(Checksum(off + 2, ((off, off + 2), (off + 4, end))))
            l3 = None
    return out


def _stored(frame: bytes | bytearray, c: Checksum) -> int:
    return struct.unpack_from("!H", frame, c.field)[0]


# -- mapping -----------------------------------------------------------------------------------------
def permitted(version: int, value: int) -> bool:
    """``value`` (an address as an integer) is inside the range the testbed may send."""
    return ipaddress.ip_address(value if version == 4 else value.to_bytes(16, "big")) in PERMITTED[version // 6]


def mapped(f: AddressField, value: int) -> int:
    """``value`` at ``f`` as the testbed sends it."""
    if permitted(f.version, value):
        return value
    return f.target << f.keep | value & ((1 << f.keep) - 1)


def translate_frame(frame: bytes) -> tuple[bytes, list[tuple[AddressField, int]]]:
    """``frame`` with its addresses mapped and its right checksums kept right, and each field mapped
    with its original value."""
    fields = address_fields(frame)
    right = [c for c in frame_checksums(frame) if c.value(frame) == _stored(frame, c)]
    out, changed = bytearray(frame), []
    for f in fields:
        value = int.from_bytes(frame[f.offset:f.offset + f.size], "big")
        new = mapped(f, value)
        if new != value:
            out[f.offset:f.offset + f.size] = new.to_bytes(f.size, "big")
            changed.append((f, value))
    if changed:
        for c in sorted(right, key=lambda c: -c.field):  # inner first: outer checksums cover inner ones
            out[c.field:c.field + 2] = struct.pack("!H", c.value(out))
    return bytes(out), changed


def written_bytes(ins: Instr) -> set[int]:
    """The bytes of the frame a write or masked write can change."""
    if ins.kind == "write":
        return set(range(ins.offset, ins.offset + ins.size))
    return {ins.offset + (i if ins.big_endian else ins.size - 1 - i) for i in range(ins.size)
            if ins.mask >> (8 * (ins.size - 1 - i)) & 0xFF}


def _value_range(stream: StlStream, ins: Instr) -> tuple[int, int]:
    """The first and last value ``ins`` writes (variable + add_value, not wrapped)."""
    v = stream.vars[ins.var]
    return v.min + ins.add, v.max + ins.add


def translate_write(stream: StlStream, ins: Instr, f: AddressField) -> tuple[Instr, Mapping | None]:
    """``ins`` (a write into the high bits of ``f``) as the testbed runs it, and the prefix it maps;
    refused in one line unless it is a whole-high-part write whose values share their high bits."""
    size = 4 if f.version == 4 else 8
    keep = f.keep if f.version == 4 else 0  # an IPv6 write covers the high 64 bits only
    var = stream.vars[ins.var] if ins.var >= 0 else None
    whole = (ins.kind == "write" and ins.offset == f.offset and ins.size == size and ins.big_endian
             and not ins.port and var is not None)
    what = f"{stream.name} {_var_name(stream, ins)} written to the {f.label()}"
    if not whole:
        raise ConfigError(what, f"{ins.kind} of {ins.size} bytes at byte {ins.offset}",
                          _allowed(f))
    lo, hi = _value_range(stream, ins)
    bits = 8 * size
    shown = f"{_addr(f, lo % (1 << bits), bits)} .. {_addr(f, hi % (1 << bits), bits)}"
    if lo >> bits != hi >> bits:
        raise ConfigError(what, shown + " (wraps)", _allowed(f))
    lo, hi = lo % (1 << bits), hi % (1 << bits)
    if _inside(f, lo) and _inside(f, hi):  # a contiguous range with both ends inside
        return ins, None
    if lo >> keep != hi >> keep:
        raise ConfigError(what, shown, _allowed(f))
    high = lo >> keep
    delta = ((f.target - high) << keep) % (1 << bits)
    return replace(ins, add=(ins.add + delta) % (1 << bits)), Mapping(f.version, high, f.target)


def _inside(f: AddressField, value: int) -> bool:
    """The written value (the whole IPv4 address, or the high 64 bits of an IPv6 one) is permitted."""
    return permitted(f.version, value if f.version == 4 else value << 64)


def _addr(f: AddressField, value: int, bits: int) -> str:
    if f.version == 4:
        return str(ipaddress.IPv4Address(value))
    return str(ipaddress.IPv6Address(value << 64)) + "/64"


def _allowed(f: AddressField) -> str:
    if f.version == 4:
        return ("writes of the low 16 bits, or of the whole address (4 bytes, big-endian) with values "
                "within one /16 or inside 198.18.0.0/15: the testbed maps addresses outside 198.18.0.0/15 "
                "keeping their low 16 bits")
    return ("writes of the low 64 bits, or of the high 64 bits (8 bytes, big-endian) with one value or values "
            "inside 2001:2::/48: the testbed maps addresses outside 2001:2::/48 keeping their low 64 bits")


def _var_name(stream: StlStream, ins: Instr) -> str:
    if ins.var < 0:
        return "a write"
    v = stream.vars[ins.var]
    kind = "tuple_flow_var" if v.op == "tuple" else "flow_var"
    return f"{kind} {v.name!r}" + (" port" if ins.port else "") + f" ({v.min}..{v.max})"


def translate_stream(stream: StlStream) -> tuple[StlStream, set[Mapping]]:
    """``stream`` as the testbed sends it, and the prefixes it maps (those that reach the wire)."""
    fields = address_fields(stream.frame)
    frame, changed = translate_frame(stream.frame)
    program, maps = list(stream.program), set()
    overwritten: set[AddressField] = set()
    for k, ins in enumerate(program):
        if ins.kind not in ("write", "write_mask"):
            continue
        touched = written_bytes(ins)
        for f in fields:
            if touched & set(range(f.offset, f.high_end)):
                program[k], m = translate_write(stream, program[k], f)
                overwritten.add(f)
                maps |= {m} if m else set()
    for f, value in changed:
        if f not in overwritten:  # a template address every packet carries
            maps.add(Mapping(f.version, value >> f.keep, f.target))
    return replace(stream, frame=frame, program=tuple(program)), maps


def for_testbed(profile: StlProfile) -> tuple[StlProfile, tuple[Mapping, ...]]:
    """``profile`` with every stream's addresses mapped into the testbed's ranges, and the mappings."""
    streams, maps = [], set()
    for st in profile.streams:
        s, m = translate_stream(st)
        streams.append(s)
        maps |= m
    return replace(profile, streams=tuple(streams)), tuple(sorted(maps))


def note(maps: tuple[Mapping, ...]) -> str:
    """The trial's note on the mapping ("" when nothing was mapped)."""
    if not maps:
        return ""
    return ("addresses outside 198.18.0.0/15 and 2001:2::/48 mapped for the testbed: "
            + ", ".join(str(m) for m in maps))
