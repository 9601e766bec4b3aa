"""The Python mirror of ``bpf/include/pgwu_kern_user.h`` (and of GTP-U's port in ``gtpu.h``), checked
against BTF and the compiled headers by the layout tests.

Fields typed ``__be*`` in C hold network order; ``perfkit.dataplanes.pgwu.control`` converts.
"""
from __future__ import annotations

import enum

from perfkit.layouts import MAC, Struct, u16, u32, u64

#: GTP-U's UDP port (3GPP TS 29.281), both ways.
GTPU_PORT = 2152
PGWU_F_UDP_CSUM = 1 << 0
PGWU_F_XDP_TX = 1 << 1
#: The session tables' designs (``-DPGWU_SESSION_TABLE=``), by the name of the ``session_table``
#: build option.
SESSION_TABLES: dict[str, int] = {"hash": 0, "percpu_hash": 1, "lru_percpu_hash": 2, "teid_array": 3}


class pgwu_config(Struct):
    _fields_ = [("s5_ifindex", u32), ("sgi_ifindex", u32), ("gtpu_addr", u32), ("sgi_addr", u32),
                ("s5_src_mac", MAC), ("s5_dst_mac", MAC), ("sgi_src_mac", MAC), ("sgi_dst_mac", MAC),
                ("s5_vlan", u16), ("s5_mtu", u16), ("flags", u32), ("ul_teid_base", u32), ("teid_stride", u32)]


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


#: Every mirrored struct, by C name.
STRUCTS: dict[str, type[Struct]] = {cls.__name__: cls for cls in (pgwu_config, pgwu_ul_session, pgwu_dl_key,
                                                                   pgwu_dl_session, pgwu_stat_rec)}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"pgwu_stat": PgwuStat}
HEADERS = ("pgwu_kern_user.h",)
#: Constants of ``DEFINE_HEADERS`` mirrored here, by C name.
DEFINES: dict[str, int] = {"GTPU_PORT": GTPU_PORT, "PGWU_F_UDP_CSUM": PGWU_F_UDP_CSUM, "PGWU_F_XDP_TX": PGWU_F_XDP_TX,
                           **{f"PGWU_TABLE_{name.upper()}": v for name, v in SESSION_TABLES.items()}}
DEFINE_HEADERS = ("gtpu.h", "pgwu_kern_user.h")
