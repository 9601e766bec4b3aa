"""The one Python mirror of the structs and enums in ``bpf/include/*_kern_user.h``.

Each ctypes Structure here has the C struct's name; ``tests/test_layouts.py`` compares every one,
field by field (name, offset, size), with the BTF of the compiled objects, so a change to a header
that is not made here too fails the tests. Byte order: fields typed ``__be*`` in C hold network
order; the helpers that fill them (``perfkit.pgwu``) convert.
"""
from __future__ import annotations

import ctypes
import enum

u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
MAC = u8 * 6


class Struct(ctypes.Structure):
    """ctypes Structure with bytes conversion and a readable repr."""

    def to_bytes(self) -> bytes:
        return bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Struct":
        return cls.from_buffer_copy(data[:ctypes.sizeof(cls)])

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, *_ in self._fields_)
        return f"{type(self).__name__}({fields})"


# --- pgwu_kern_user.h --------------------------------------------------------------------------
PGWU_F_UDP_CSUM = 1 << 0
PGWU_F_XDP_TX = 1 << 1


class pgwu_config(Struct):
    _fields_ = [("s5_ifindex", u32), ("sgi_ifindex", u32), ("gtpu_addr", u32), ("sgi_addr", u32),
                ("s5_src_mac", MAC), ("s5_dst_mac", MAC), ("sgi_src_mac", MAC), ("sgi_dst_mac", MAC),
                ("s5_vlan", u16), ("s5_mtu", u16), ("flags", u32)]


class pgwu_ul_session(Struct):
    _fields_ = [("ue_addr", u32), ("sgi_vlan", u16), ("pad", u16), ("packets", u64), ("bytes", u64)]


class pgwu_dl_key(Struct):
    _fields_ = [("ue_addr", u32), ("vlan", u16), ("pad", u16)]


class pgwu_dl_session(Struct):
    _fields_ = [("sgw_addr", u32), ("teid", u32), ("packets", u64), ("bytes", u64)]


class pgwu_stat_rec(Struct):
    _fields_ = [("packets", u64), ("bytes", u64)]


class PgwuStat(enum.IntEnum):
    """enum pgwu_stat: what happened to a packet (index of the pgwu_stats array)."""

    PGWU_UL_FWD = 0
    PGWU_DL_FWD = 1
    PGWU_PASS = 2
    PGWU_DROP_TRUNCATED = 3
    PGWU_DROP_BAD_HEADER = 4
    PGWU_DROP_FRAGMENT = 5
    PGWU_DROP_GTP_VERSION = 6
    PGWU_DROP_GTP_EXT = 7
    PGWU_DROP_UNKNOWN_TEID = 8
    PGWU_DROP_UE_MISMATCH = 9
    PGWU_DROP_INNER_NOT_IPV4 = 10
    PGWU_DROP_INNER_TRUNCATED = 11
    PGWU_DROP_DL_NO_SESSION = 12
    PGWU_DROP_TOO_BIG = 13
    PGWU_DROP_INTERNAL = 14
    PGWU_STAT_MAX = 15

    @property
    def label(self) -> str:
        """Short lower-case name used in results and metrics: ``drop_unknown_teid``."""
        return self.name.removeprefix("PGWU_").lower()


# --- bench_kern_user.h -------------------------------------------------------------------------
BENCH_RESTORE_MAX = 128


class bench_config(Struct):
    _fields_ = [("frame_len", u32), ("restore_len", u32), ("nkeys", u32), ("teid_off", u16),
                ("ue_off", u16), ("vlan_off", u16), ("pad", u16)]


class bench_key(Struct):
    _fields_ = [("teid", u32), ("ue_addr", u32), ("vlan", u16), ("pad", u16)]


class bench_template(Struct):
    _fields_ = [("bytes", u8 * BENCH_RESTORE_MAX)]


#: Every mirrored struct, by C name (the BTF test walks this).
STRUCTS: dict[str, type[Struct]] = {
    cls.__name__: cls for cls in (pgwu_config, pgwu_ul_session, pgwu_dl_key, pgwu_dl_session,
                                  pgwu_stat_rec, bench_config, bench_key,
                                  bench_template)
}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"pgwu_stat": PgwuStat}
#: Which compiled object holds each struct's BTF.
BTF_OBJECTS: dict[str, str] = {name: "bench.o" if name.startswith("bench_") else "pgwu.o" for name in STRUCTS}
