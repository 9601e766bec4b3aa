"""The Python mirror of ``bpf/include/l4lb_kern_user.h``.

``tests/test_l4lb.py`` compares every struct, field by field (name, offset, size), with the BTF of
``build/bpf/l4lb.o`` and with a C program compiled from the header. Fields typed ``__be*`` in C hold
network order; ``perfkit.dataplanes.l4lb.control`` converts.
"""
from __future__ import annotations

import enum

from perfkit.layouts import MAC, Struct, u8, u16, u32, u64

L4LB_RING_SIZE = 65537
L4LB_MAX_VIPS = 64
L4LB_MAX_REALS = 4096
L4LB_NO_REAL = 0
L4LB_HASH_SEED = 0x4C344C42
L4LB_F_XDP_TX = 1 << 0
L4LB_VIP_F_MSS_CLAMP = 1 << 0
L4LB_DEFAULT_MTU = 1500
L4LB_VIP_SLOTS = 4 * L4LB_MAX_VIPS
L4LB_VIP_PROBES = 8
L4LB_VIP_EMPTY = 0
L4LB_VIP_REMOVED = 0xFF
L4LB_VIP_MUL1 = 0x9E3779B1
L4LB_VIP_MUL2 = 0x85EBCA6B


class l4lb_config(Struct):
    _fields_ = [("lb_addr", u32), ("egress_ifindex", u32), ("src_mac", MAC), ("dst_mac", MAC),
                ("egress_mtu", u16), ("pad", u16), ("flags", u32)]


class vip_key(Struct):
    _fields_ = [("addr", u32), ("port", u16), ("proto", u8), ("pad", u8)]


class vip_meta(Struct):
    _fields_ = [("vip_num", u32), ("flags", u32)]


class vip_slot(Struct):
    _fields_ = [("key", vip_key), ("meta", vip_meta)]


class l4lb_consts(Struct):
    _fields_ = [("vip_mask", u32)]


class ch_ring(Struct):
    _fields_ = [("reals", u16 * L4LB_RING_SIZE)]


class real_def(Struct):
    _fields_ = [("addr", u32)]


class l4lb_stat_rec(Struct):
    _fields_ = [("packets", u64), ("bytes", u64)]


class L4lbStat(enum.IntEnum):
    """enum l4lb_stat: what happened to a packet (index of the l4lb_stats array)."""

    L4LB_FWD = 0
    L4LB_PASS = 1
    L4LB_ICMP_FRAG_NEEDED = 2
    L4LB_DROP_TRUNCATED = 3
    L4LB_DROP_BAD_HEADER = 4
    L4LB_DROP_FRAGMENT = 5
    L4LB_DROP_NO_REAL = 6
    L4LB_DROP_TOO_BIG = 7
    L4LB_DROP_INTERNAL = 8
    L4LB_STAT_MAX = 9

    @property
    def label(self) -> str:
        """Short lower-case name used in results and metrics: ``drop_truncated``, ``fwd``."""
        return self.name.removeprefix("L4LB_").lower()


#: Every mirrored struct, by C name.
STRUCTS: dict[str, type[Struct]] = {
    cls.__name__: cls for cls in (l4lb_config, vip_key, vip_meta, vip_slot, l4lb_consts, ch_ring, real_def,
                                  l4lb_stat_rec)
}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"l4lb_stat": L4lbStat}
#: The headers mirrored here (the layout tests compile them).
HEADERS = ("l4lb_kern_user.h",)
