"""The Internet checksum (RFC 1071), for reference models and tests."""
from __future__ import annotations

import struct


def ones_sum(data: bytes | bytearray) -> int:
    """RFC 1071 one's-complement sum of big-endian 16-bit words (0xffff over a region with a valid
    checksum); an odd length gets a zero byte appended (to a copy: a caller's bytearray is left as is)."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def csum(data: bytes | bytearray) -> int:
    """The checksum field value that makes ``data`` (with the field zero) sum to 0xffff."""
    return ~ones_sum(data) & 0xFFFF
