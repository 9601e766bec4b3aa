"""The one Python mirror of the structs and enums in ``bpf/include/*_kern_user.h``.

Each ctypes Structure here has the C struct's name; ``tests/test_layouts.py`` compares every one,
field by field (name, offset, size), with the BTF of the compiled objects (what the kernel sees)
and with a C program compiled from the headers, so a change to a header that is not made here too
fails the tests. Byte order: fields typed ``__be*`` in C hold network
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


# --- trafficgen_kern_user.h ----------------------------------------------------------------------
GEN_TEMPLATE_MAX, GEN_MAX_VARS, GEN_MAX_WRITES, GEN_MAX_CSUMS = 128, 2, 4, 3
SIGNATURE_MAGIC = 0x4B50
SINK_MAX_STREAMS, SINK_WINDOW_WORDS, SINK_HIST_BUCKETS, SINK_SNAPLEN = 64, 16, 1024, 4096


class GenOp(enum.IntEnum):
    """enum gen_op: how a flow variable changes from packet to packet."""

    GEN_OP_INC = 0
    GEN_OP_DEC = 1
    GEN_OP_RANDOM = 2


class gen_var(Struct):
    _fields_ = [("min", u32), ("max", u32), ("step", u32), ("op", u8), ("pad", u8 * 3)]


class gen_write(Struct):
    _fields_ = [("offset", u16), ("size", u8), ("var", u8), ("add", u32), ("csum_old", u32), ("csum_mask", u8),
                ("pad", u8 * 3)]


class gen_config(Struct):
    _fields_ = [("tmpl", u64 * (GEN_TEMPLATE_MAX // 8)), ("frame_len", u32), ("pad0", u32),
                ("restore_len", u16), ("sig_off", u16), ("sig_csum_mask", u8), ("nvars", u8), ("nwrites", u8),
                ("pad", u8), ("sig_csum_old", u32), ("csum_off", u16 * GEN_MAX_CSUMS), ("pad2", u16),
                ("vars", gen_var * GEN_MAX_VARS), ("writes", gen_write * GEN_MAX_WRITES)]


GEN_MAX_STREAMS = 64
GEN_TS_EVERY, GEN_MAX_BURST = 16, 32


class gen_state(Struct):
    _fields_ = [("tx_packets", u64), ("tx_bytes", u64), ("rng", u64), ("epoch", u64), ("start_ns", u64),
                ("due", u64), ("interval", u64), ("stop_after", u64), ("quota", u64), ("last_ns", u64), ("last_ts", u32),
                ("ts_count", u32), ("stream_base", u16), ("stream_mask", u16),
                ("var_pos", u32 * GEN_MAX_VARS), ("seq", u32 * GEN_MAX_STREAMS)]


class signature(Struct):
    _fields_ = [("magic", u16), ("stream", u16), ("seq", u32), ("tx_ns", u32)]


class sink_config(Struct):
    _fields_ = [("capture_max", u32), ("pad", u32)]


class sink_stream(Struct):
    _fields_ = [("packets", u64), ("bytes", u64), ("reordered", u64), ("duplicates", u64), ("late", u64),
                ("max_seq", u32), ("started", u32), ("last_delay", u32), ("lat_min", u32), ("lat_max", u32),
                ("pad", u32), ("window", u64 * SINK_WINDOW_WORDS)]


class sink_totals(Struct):
    _fields_ = [("packets", u64), ("bytes", u64), ("unsigned_packets", u64), ("captured", u64)]


class sink_capture(Struct):
    _fields_ = [("len", u32), ("caplen", u32), ("ts_ns", u64), ("data", u8 * SINK_SNAPLEN)]


# --- steer_kern_user.h --------------------------------------------------------------------------
STEER_MAX_CPUS = 64


class steer_config(Struct):
    _fields_ = [("ncpus", u32), ("cpus", u32 * STEER_MAX_CPUS)]


#: Every mirrored struct, by C name (the BTF test walks this).
STRUCTS: dict[str, type[Struct]] = {
    cls.__name__: cls for cls in (pgwu_config, pgwu_ul_session, pgwu_dl_key, pgwu_dl_session,
                                  pgwu_stat_rec, bench_config, bench_key, bench_template, gen_var,
                                  gen_write, gen_config, gen_state, signature, sink_config, sink_stream,
                                  sink_totals, sink_capture, steer_config)
}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"pgwu_stat": PgwuStat, "gen_op": GenOp}
#: The headers mirrored here (the layout tests compile them).
HEADERS = ("pgwu_kern_user.h", "bench_kern_user.h", "trafficgen_kern_user.h", "steer_kern_user.h")
