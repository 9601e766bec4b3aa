"""The one Python mirror of the generic structs and enums in ``bpf/include/*_kern_user.h`` (the
generator, sink, steering and prog-bench harness; each dataplane mirrors its own header in
``perfkit/dataplanes/<name>/layouts.py`` on the same base ``Struct``), and of the protocol
constants of ``bpf/include/parsing.h`` the reference models use too.

Each ctypes Structure here has the C struct's name; ``tests/test_layouts.py`` compares every one,
field by field (name, offset, size), with the BTF of the compiled objects (what the kernel sees)
and with a C program compiled from the headers, and every constant of ``DEFINES`` with the header's
value, so a change to a header that is not made here too fails the tests. Byte order: fields typed
``__be*`` in C hold network order; the code that fills them converts.
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


# --- parsing.h (and the kernel headers it includes) -----------------------------------------------
#: Ethertypes: IPv4, an 802.1Q tag.
ETH_P_IP, ETH_P_8021Q = 0x0800, 0x8100
#: IPv4 protocols.
IPPROTO_IPIP, IPPROTO_TCP, IPPROTO_UDP = 4, 6, 17
#: IPv4 frag_off bits (host order): don't fragment, more fragments, the fragment offset.
IP_DF, IP_MF, IP_OFFSET = 0x4000, 0x2000, 0x1FFF


# --- bench_kern_user.h -------------------------------------------------------------------------
BENCH_RESTORE_MAX, BENCH_MAX_FIELDS, BENCH_KEY_MAX = 128, 4, 16


class bench_field(Struct):
    _fields_ = [("offset", u16), ("size", u8), ("key_off", u8)]


class bench_config(Struct):
    _fields_ = [("frame_len", u32), ("restore_len", u32), ("nkeys", u32), ("nfields", u32),
                ("fields", bench_field * BENCH_MAX_FIELDS)]


class bench_key(Struct):
    _fields_ = [("bytes", u8 * BENCH_KEY_MAX)]


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


GEN_VM_MAX_VARS, GEN_VM_MAX_OPS, GEN_VM_MAX_CSUMS, GEN_VM_CSUM_RANGES = 8, 16, 4, 6
GEN_VM_BIG_ENDIAN, GEN_VM_PORT, GEN_VM_CSUM_UDP = 1, 2, 1


class GenVmVarOp(enum.IntEnum):
    """enum gen_vm_var_op: how a TRex VM variable changes from packet to packet."""

    GEN_VM_INC = 0
    GEN_VM_DEC = 1
    GEN_VM_RANDOM = 2
    GEN_VM_TUPLE = 3


class GenVmOpKind(enum.IntEnum):
    """enum gen_vm_op_kind: one operation of a TRex VM program."""

    GEN_VM_OP_UPDATE = 1
    GEN_VM_OP_WRITE = 2
    GEN_VM_OP_WRITE_MASK = 3


class gen_vm_var(Struct):
    _fields_ = [("min", u64), ("max", u64), ("step", u64), ("prev", u64), ("limit", u32), ("port_min", u16),
                ("port_max", u16), ("prev_port", u16), ("op", u8), ("size", u8), ("pad", u32)]


class gen_vm_op(Struct):
    _fields_ = [("add", u64), ("mask", u32), ("offset", u16), ("kind", u8), ("var", u8), ("size", u8), ("flags", u8),
                ("shift", ctypes.c_int8), ("pad", u8 * 5)]


class gen_vm_csum(Struct):
    _fields_ = [("old", u32), ("off", u16), ("flags", u8), ("nranges", u8), ("lo", u16 * GEN_VM_CSUM_RANGES),
                ("hi", u16 * GEN_VM_CSUM_RANGES)]


GEN_MIX_MAX_STREAMS = 4


class gen_mix(Struct):
    _fields_ = [("nstreams", u32), ("base_len", u32), ("weight", ctypes.c_int32 * GEN_MIX_MAX_STREAMS),
                ("total", ctypes.c_int32), ("timed", u32), ("burst", u32 * GEN_MIX_MAX_STREAMS),
                ("start_ns", u64 * GEN_MIX_MAX_STREAMS), ("gap_ns", u64 * GEN_MIX_MAX_STREAMS)]


class gen_config(Struct):
    _fields_ = [("tmpl", u64 * (GEN_TEMPLATE_MAX // 8)), ("frame_len", u32), ("pad0", u32),
                ("restore_len", u16), ("sig_off", u16), ("sig_csum_mask", u8), ("nvars", u8), ("nwrites", u8),
                ("pad", u8), ("sig_csum_old", u32), ("csum_off", u16 * GEN_MAX_CSUMS), ("pad2", u16),
                ("vars", gen_var * GEN_MAX_VARS), ("writes", gen_write * GEN_MAX_WRITES),
                ("vm_nvars", u8), ("vm_nops", u8), ("vm_ncsums", u8), ("vm_pad", u8 * 5),
                ("vm_vars", gen_vm_var * GEN_VM_MAX_VARS), ("vm_ops", gen_vm_op * GEN_VM_MAX_OPS),
                ("vm_csums", gen_vm_csum * GEN_VM_MAX_CSUMS)]


GEN_MAX_STREAMS = 64
GEN_TS_EVERY, GEN_MAX_BURST = 16, 32


class gen_state(Struct):
    _fields_ = [("tx_packets", u64), ("tx_bytes", u64), ("rng", u64), ("epoch", u64), ("start_ns", u64),
                ("due", u64), ("interval", u64), ("stop_after", u64), ("quota", u64), ("last_ns", u64), ("last_ts", u32),
                ("ts_count", u32), ("stream_base", u16), ("stream_mask", u16),
                ("var_pos", u32 * GEN_MAX_VARS), ("seq", u32 * GEN_MAX_STREAMS), ("vm_val", u64 * GEN_VM_MAX_VARS),
                ("vm_flow", u32 * GEN_VM_MAX_VARS), ("vm_port", u16 * GEN_VM_MAX_VARS), ("vm_ready", u32),
                ("mix_cur", ctypes.c_int32 * GEN_MIX_MAX_STREAMS), ("mix_clock", u32),
                ("mix_limit", u64 * GEN_MIX_MAX_STREAMS), ("mix_sent", u64 * GEN_MIX_MAX_STREAMS),
                ("mix_at", u64 * GEN_MIX_MAX_STREAMS)]


class signature(Struct):
    _fields_ = [("magic", u16), ("stream", u16), ("seq", u32), ("tx_ns", u32)]


class sink_config(Struct):
    _fields_ = [("capture_max", u32), ("pad", u32)]


class sink_stream(Struct):
    _fields_ = [("packets", u64), ("bytes", u64), ("reordered", u64), ("duplicates", u64), ("late", u64),
                ("max_seq", u32), ("started", u32), ("last_delay", u32), ("lat_min", u32), ("lat_max", u32),
                ("pad", u32), ("window", u64 * SINK_WINDOW_WORDS)]


class sink_totals(Struct):
    _fields_ = [("packets", u64), ("bytes", u64), ("unsigned_packets", u64), ("captured", u64), ("last_ns", u64),
                ("max_gap_ns", u64)]


class socksink_totals(Struct):
    _fields_ = [("datagrams", u64), ("skbs", u64), ("bytes", u64)]


class sink_capture(Struct):
    _fields_ = [("len", u32), ("caplen", u32), ("ts_ns", u64), ("data", u8 * SINK_SNAPLEN)]


# --- encap_kern_user.h --------------------------------------------------------------------------
ENCAP_MAX, ENCAP_MAX_EXT = 4, 4


class EncapInner(enum.IntEnum):
    """enum encap_inner: what follows a tunnel's header."""

    ENCAP_INNER_IPV4 = 0
    ENCAP_INNER_ETHER = 1


class encap(Struct):
    _fields_ = [("udp_dport", u16), ("ip_proto", u8), ("inner", u8), ("hdr_len", u8), ("flags_off", u8),
                ("opt_mask", u8), ("opt_len", u8), ("ext_mask", u8), ("ext_type_off", u8), ("ext_unit", u8),
                ("pad", u8)]


class encap_table(Struct):
    _fields_ = [("n", u32), ("encaps", encap * ENCAP_MAX)]


# --- steer_kern_user.h --------------------------------------------------------------------------
STEER_MAX_CPUS, STEER_MAX_WORDS = 64, 4


class SteerAt(enum.IntEnum):
    """enum steer_at: where a word the steering program hashes is."""

    STEER_AT_IP = 0
    STEER_AT_L4 = 1
    STEER_AT_TUNNEL = 2


class steer_word(Struct):
    _fields_ = [("at", u8), ("offset", u8), ("pad", u16), ("mul", u32)]


class steer_config(Struct):
    _fields_ = [("ncpus", u32), ("nwords", u32), ("words", steer_word * STEER_MAX_WORDS), ("tunnel", encap),
                ("cpus", u32 * STEER_MAX_CPUS)]


# --- stallprobe_kern_user.h --------------------------------------------------------------------
STALL_MAX_CPUS, STALL_HIST_BUCKETS = 64, 16


class stall_config(Struct):
    _fields_ = [("period_ns", u64), ("report_ns", u64), ("speed_steps", u64), ("speed_every", u64)]


class stall_cpu(Struct):
    _fields_ = [("last_ns", u64), ("last_steal_ns", u64), ("ticks", u64), ("stalls", u64), ("stalled_ns", u64),
                ("max_gap_ns", u64), ("lost_events", u64), ("waits", u64), ("max_wait_ns", u64),
                ("hist", u64 * STALL_HIST_BUCKETS), ("speed_ns", u64), ("speed_probes", u64)]


class StallKind(enum.IntEnum):
    STALL_TICK = 0
    STALL_WAIT = 1


class stall_watch(Struct):
    _fields_ = [("since_ns", u64), ("rt_ns", u64), ("steal_ns", u64)]


class stall_event(Struct):
    _fields_ = [("end_ns", u64), ("gap_ns", u64), ("steal_ns", u64), ("cpu", u32), ("kind", u32), ("own_ns", u64)]


# --- coreshare_kern_user.h ---------------------------------------------------------------------
class CoreClass(enum.IntEnum):
    CORE_IDLE = 0
    CORE_PACKET = 1
    CORE_PERFKIT = 2
    CORE_OTHER = 3
    CORE_CLASSES = 4


class core_share(Struct):
    _fields_ = [("ns", u64 * CoreClass.CORE_CLASSES), ("since_ns", u64), ("running", u32), ("pad", u32)]


#: Every mirrored struct, by C name (the BTF test walks this).
STRUCTS: dict[str, type[Struct]] = {
    cls.__name__: cls for cls in (bench_config, bench_field, bench_key, bench_template, gen_var,
                                  gen_write, gen_vm_var, gen_vm_op, gen_vm_csum, gen_mix, gen_config, gen_state, signature, sink_config, sink_stream,
                                  sink_totals, socksink_totals, sink_capture, encap, encap_table, steer_word, steer_config,
                                  stall_config, stall_cpu,
                                  stall_watch, stall_event, core_share)
}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"gen_op": GenOp, "gen_vm_var_op": GenVmVarOp, "gen_vm_op_kind": GenVmOpKind, "encap_inner": EncapInner, "steer_at": SteerAt,
                                         "stall_kind": StallKind,
                                         "core_class": CoreClass}
#: The headers mirrored here (the layout tests compile them).
HEADERS = ("bench_kern_user.h", "trafficgen_kern_user.h", "encap_kern_user.h", "steer_kern_user.h",
           "stallprobe_kern_user.h", "coreshare_kern_user.h")
#: Constants mirrored here, by C name (the layout tests compare their values with ``HEADERS`` and
#: ``DEFINE_HEADERS``).
DEFINES: dict[str, int] = {"ETH_P_IP": ETH_P_IP, "ETH_P_8021Q": ETH_P_8021Q, "IPPROTO_IPIP": IPPROTO_IPIP,
                           "IPPROTO_TCP": IPPROTO_TCP, "IPPROTO_UDP": IPPROTO_UDP, "IP_DF": IP_DF, "IP_MF": IP_MF, "IP_OFFSET": IP_OFFSET, "ENCAP_MAX": ENCAP_MAX,
                           "ENCAP_MAX_EXT": ENCAP_MAX_EXT, "STEER_MAX_CPUS": STEER_MAX_CPUS,
                           "STEER_MAX_WORDS": STEER_MAX_WORDS}
DEFINE_HEADERS = ("parsing.h",)
