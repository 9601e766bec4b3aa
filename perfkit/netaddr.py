"""Address conversions the control planes share (IPv4 as integers, MACs as bytes, byte order)."""
from __future__ import annotations

import functools
import ipaddress
import struct


@functools.lru_cache(maxsize=1 << 16)
def ip2int(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


@functools.lru_cache(maxsize=1 << 16)
def int2ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def be32(value: int) -> int:
    """A host-order u32 as the integer whose little-endian bytes are network order (and back)."""
    return struct.unpack("=I", struct.pack("!I", value))[0]


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))
