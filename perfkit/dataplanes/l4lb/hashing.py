"""The hashes of ``bpf/l4lb.bpf.c`` in Python: the flow hash, Bob Jenkins' jhash as in the kernel's
``include/linux/jhash.h`` (and ``bpf/include/jhash.h``), and the slot a flow takes in a table; the
VIP table's home slot (``l4lb_vip_home`` of ``bpf/include/l4lb_kern_user.h``).

Written independently of the C code from the same definitions. Every function works on Python ints
and, element-wise, on numpy ``uint64`` arrays holding 32-bit values (every step is masked to 32
bits), so 100,000 flows hash in milliseconds.
"""
from __future__ import annotations

from typing import TypeVar

from perfkit.dataplanes.l4lb.layouts import L4LB_HASH_SEED, L4LB_RING_SIZE, L4LB_VIP_MUL1, L4LB_VIP_MUL2

JHASH_INITVAL = 0xDEADBEEF
M32 = 0xFFFFFFFF
T = TypeVar("T")


def rol32(x: T, k: int) -> T:
    return ((x << k) | (x >> (32 - k))) & M32  # type: ignore[operator]


def _final(a, b, c):  # type: ignore[no-untyped-def]
    c = ((c ^ b) - rol32(b, 14)) & M32
    a = ((a ^ c) - rol32(c, 11)) & M32
    b = ((b ^ a) - rol32(a, 25)) & M32
    c = ((c ^ b) - rol32(b, 16)) & M32
    a = ((a ^ c) - rol32(c, 4)) & M32
    b = ((b ^ a) - rol32(a, 14)) & M32
    c = ((c ^ b) - rol32(b, 24)) & M32
    return c


def jhash_3words(a: T, b: T, c: T, initval: int) -> T:
    """The kernel's ``jhash_3words``: only the final mix, seeded with initval + 0xdeadbeef + 12."""
    iv = (initval + JHASH_INITVAL + (3 << 2)) & M32
    return _final((a + iv) & M32, (b + iv) & M32, (c + iv) & M32)  # type: ignore[operator]


def jhash_2words(a: T, b: T, initval: int) -> T:
    iv = (initval + JHASH_INITVAL + (2 << 2)) & M32
    return _final((a + iv) & M32, (b + iv) & M32, iv)  # type: ignore[operator]


def flow_hash(saddr: T, daddr: T, sport: T, dport: T, proto: int) -> T:
    """The program's hash of a 5-tuple (addresses and ports as host-order integers):
    ``jhash_3words(saddr, daddr, sport << 16 | dport, L4LB_HASH_SEED + proto)``."""
    return jhash_3words(saddr, daddr, ((sport << 16) | dport) & M32, L4LB_HASH_SEED + proto)  # type: ignore[operator]


def flow_slot(saddr: T, daddr: T, sport: T, dport: T, proto: int, size: int = L4LB_RING_SIZE) -> T:
    """The table entry a flow takes: its hash modulo the table size."""
    return flow_hash(saddr, daddr, sport, dport, proto) % size  # type: ignore[operator]


def vip_home(addr: int, port: int, proto: int) -> int:
    """``l4lb_vip_home``: the VIP table's hash of a VIP (address and port as host-order integers),
    before masking with the table's ``vip_mask``."""
    h = ((addr * L4LB_VIP_MUL1) & M32) ^ ((port << 8) | proto)
    h = (h * L4LB_VIP_MUL2) & M32
    return h ^ (h >> 16)
