"""A thin ctypes binding of libbpf (>= 1.0): load BPF objects, use maps, run and attach programs.

Only what perfkit needs, with errors turned into ``BpfError`` naming the call. libbpf >= 1.0
returns ``-errno`` (or NULL with ``errno`` set), which is what ``_check`` relies on.

Typical use::

    with BpfObject.load("build/bpf/sink.o") as obj:
        config = obj.map("sink_config")
        config.update(key_bytes, value_bytes)
        res = obj.program("xdp_sink").test_run(packet)
        print(res.retval, res.data_out)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from perfkit import stop
from perfkit.errors import BpfError
from perfkit.provenance import file_sha256

# enum bpf_map_type / bpf_attach_type values used here (uapi/linux/bpf.h)
BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2
BPF_XDP_CPUMAP = 35  # enum bpf_attach_type
BPF_STATS_RUN_TIME = 0
# XDP attach flags (uapi/linux/if_link.h)
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_REPLACE = 1 << 4
#: enum bpf_map_type: the per-CPU maps (PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH)
PERCPU_MAP_TYPES = (5, 6, 10)
# BPF_PROG_TEST_RUN flags
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
# XDP verdicts
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
XDP_VERDICTS = {XDP_ABORTED: "XDP_ABORTED", XDP_DROP: "XDP_DROP", XDP_PASS: "XDP_PASS",
                XDP_TX: "XDP_TX", XDP_REDIRECT: "XDP_REDIRECT"}
#: Headroom the kernel gives an XDP test-run buffer; packets may grow by at most this much.
XDP_PACKET_HEADROOM = 256
#: Bytes of verifier log kept per program of a failed load (``BpfObject(verifier_log=True)``).
VERIFIER_LOG_SIZE = 1 << 20
# enum bpf_map_type values perfkit.describe writes entries into
BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY = 1, 2, 5, 6
BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH, BPF_MAP_TYPE_LPM_TRIE = 9, 10, 11
BPF_MAP_TYPE_DEVMAP, BPF_MAP_TYPE_DEVMAP_HASH = 14, 25


class VerifierError(BpfError):
    """The kernel's verifier refused a program; ``log`` is what it said."""

    def __init__(self, what: str, errno_: int, log: str):
        super().__init__(what, errno_)
        self.log = log


class XdpMd(ctypes.Structure):
    """struct xdp_md, the context passed to BPF_PROG_TEST_RUN for XDP programs."""

    _fields_ = [("data", ctypes.c_uint32), ("data_end", ctypes.c_uint32),
                ("data_meta", ctypes.c_uint32), ("ingress_ifindex", ctypes.c_uint32),
                ("rx_queue_index", ctypes.c_uint32), ("egress_ifindex", ctypes.c_uint32)]


class BpfTestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (libbpf 1.x); public for loops that call ``lib().bpf_prog_test_run_opts``
    themselves (``perfkit.fuzz.run``: one frame per call, no copies)."""

    _fields_ = [("sz", ctypes.c_size_t),
                ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int),
                ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


class _BatchOpts(ctypes.Structure):
    """struct bpf_map_batch_opts."""

    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):
    """The head of ``struct bpf_map_info`` (uapi/linux/bpf.h)."""

    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


class MapInfoBtf(ctypes.Structure):
    """``struct bpf_map_info`` up to its BTF ids (uapi/linux/bpf.h)."""

    _fields_ = _MapInfo._fields_ + [("ifindex", ctypes.c_uint32), ("btf_vmlinux_value_type_id", ctypes.c_uint32),
                                    ("netns_dev", ctypes.c_uint64), ("netns_ino", ctypes.c_uint64),
                                    ("btf_id", ctypes.c_uint32), ("btf_key_type_id", ctypes.c_uint32),
                                    ("btf_value_type_id", ctypes.c_uint32)]


class BpfProgInfo(ctypes.Structure):
    """struct bpf_prog_info up to the run-time statistics (uapi/linux/bpf.h, Linux >= 5.1)."""

    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32),
                ("nr_map_ids", ctypes.c_uint32), ("map_ids", ctypes.c_uint64),
                ("name", ctypes.c_char * 16), ("ifindex", ctypes.c_uint32),
                ("gpl_compatible", ctypes.c_uint32), ("netns_dev", ctypes.c_uint64),
                ("netns_ino", ctypes.c_uint64), ("nr_jited_ksyms", ctypes.c_uint32),
                ("nr_jited_func_lens", ctypes.c_uint32), ("jited_ksyms", ctypes.c_uint64),
                ("jited_func_lens", ctypes.c_uint64), ("btf_id", ctypes.c_uint32),
                ("func_info_rec_size", ctypes.c_uint32), ("func_info", ctypes.c_uint64),
                ("nr_func_info", ctypes.c_uint32), ("nr_line_info", ctypes.c_uint32),
                ("line_info", ctypes.c_uint64), ("jited_line_info", ctypes.c_uint64),
                ("nr_jited_line_info", ctypes.c_uint32), ("line_info_rec_size", ctypes.c_uint32),
                ("jited_line_info_rec_size", ctypes.c_uint32), ("nr_prog_tags", ctypes.c_uint32),
                ("prog_tags", ctypes.c_uint64), ("run_time_ns", ctypes.c_uint64),
                ("run_cnt", ctypes.c_uint64), ("recursion_misses", ctypes.c_uint64)]


def _load_lib() -> ctypes.CDLL:
    for name in ("libbpf.so.1", ctypes.util.find_library("bpf") or ""):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
        _declare(lib)
        return lib
    raise BpfError("loading libbpf.so.1 (apt-get install libbpf1, or `make setup`)", errno.ENOENT)


def _declare(lib: ctypes.CDLL) -> None:
    vp, i, u32, u64, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_char_p
    sigs = {
        "bpf_object__open_file": (vp, [cp, vp]),
        "bpf_object__load": (i, [vp]),
        "bpf_object__close": (None, [vp]),
        "bpf_object__find_program_by_name": (vp, [vp, cp]),
        "bpf_object__find_map_by_name": (vp, [vp, cp]),
        "bpf_object__next_program": (vp, [vp, vp]),
        "bpf_object__next_map": (vp, [vp, vp]),
        "bpf_program__name": (cp, [vp]),
        "bpf_program__fd": (i, [vp]),
        "bpf_program__set_expected_attach_type": (i, [vp, i]),
        "bpf_program__set_autoload": (i, [vp, ctypes.c_bool]),
        "bpf_map__name": (cp, [vp]),
        "bpf_map__fd": (i, [vp]),
        "bpf_map__set_max_entries": (i, [vp, u32]),
        "bpf_map__max_entries": (u32, [vp]),
        "bpf_map__key_size": (u32, [vp]),
        "bpf_map__value_size": (u32, [vp]),
        "bpf_map__type": (i, [vp]),
        "bpf_map__reuse_fd": (i, [vp, i]),
        "bpf_map__set_initial_value": (i, [vp, vp, ctypes.c_size_t]),
        "bpf_map__initial_value": (vp, [vp, ctypes.POINTER(ctypes.c_size_t)]),
        "bpf_map__btf_key_type_id": (u32, [vp]),
        "bpf_map__btf_value_type_id": (u32, [vp]),
        "bpf_object__btf": (vp, [vp]),
        "btf__raw_data": (vp, [vp, ctypes.POINTER(u32)]),
        "bpf_program__set_log_buf": (i, [vp, vp, ctypes.c_size_t]),
        "bpf_xdp_query_id": (i, [i, i, ctypes.POINTER(u32)]),
        "bpf_map_update_elem": (i, [i, vp, vp, u64]),
        "bpf_map_lookup_elem": (i, [i, vp, vp]),
        "bpf_map_delete_elem": (i, [i, vp]),
        "bpf_map_get_next_key": (i, [i, vp, vp]),
        "bpf_map_update_batch": (i, [i, vp, vp, ctypes.POINTER(u32), vp]),
        "bpf_map_lookup_batch": (i, [i, vp, vp, vp, vp, ctypes.POINTER(u32), vp]),
        "bpf_prog_test_run_opts": (i, [i, vp]),
        "bpf_xdp_attach": (i, [i, i, u32, vp]),
        "bpf_obj_pin": (i, [i, cp]),
        "bpf_obj_get": (i, [cp]),
        "bpf_obj_get_info_by_fd": (i, [i, vp, ctypes.POINTER(u32)]),
        "bpf_prog_get_fd_by_id": (i, [u32]),
        "bpf_map_get_fd_by_id": (i, [u32]),
        "bpf_enable_stats": (i, [i]),
        "bpf_program__attach": (vp, [vp]),
        "bpf_link__destroy": (i, [vp]),
        "ring_buffer__new": (vp, [i, vp, vp, vp]),
        "ring_buffer__consume": (i, [vp]),
        "ring_buffer__free": (None, [vp]),
        "libbpf_num_possible_cpus": (i, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load_lib()
    return _lib


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise BpfError(what, -ret if ret != -1 else (ctypes.get_errno() or errno.EPERM))
    return ret


def num_possible_cpus() -> int:
    """CPUs the kernel may bring up: the number of slots in a per-CPU map value."""
    return _check(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


def _buf(data: bytes | bytearray | ctypes.Array | ctypes.Structure) -> ctypes.Array:
    if isinstance(data, ctypes.Array):
        return data
    raw = bytes(data)
    return (ctypes.c_char * len(raw)).from_buffer_copy(raw)


@dataclass
class TestRunResult:
    """What BPF_PROG_TEST_RUN returned for one packet."""

    retval: int
    """The program's return code (an XDP verdict for XDP programs)."""
    data_out: bytes
    """The packet after the program (empty in live-frames mode)."""
    duration_ns: int
    """Kernel-measured mean run time per repetition [ns]."""

    @property
    def verdict(self) -> str:
        return XDP_VERDICTS.get(self.retval, f"UNKNOWN({self.retval})")


class Map:
    """A BPF map of a loaded object (or one opened by fd). Keys and values are raw bytes."""

    def __init__(self, fd: int, name: str, key_size: int, value_size: int, max_entries: int,
                 percpu: bool = False):
        self.fd, self.name = fd, name
        self.key_size, self.value_size, self.max_entries = key_size, value_size, max_entries
        self.percpu = percpu

    @classmethod
    def from_id(cls, map_id: int) -> Map:
        """The map with kernel id ``map_id``, opened by id (from any network namespace: map ids are
        global); the caller owns the fd (``close``). ``BpfError`` (ENOENT) once the map is gone."""
        fd = _check(lib().bpf_map_get_fd_by_id(map_id), f"bpf_map_get_fd_by_id({map_id})")
        info = _MapInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        try:
            _check(lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)),
                   f"bpf_obj_get_info_by_fd(map {map_id})")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, info.name.decode(errors="replace"), info.key_size, info.value_size, info.max_entries,
                   info.type in PERCPU_MAP_TYPES)

    def close(self) -> None:
        """Close the fd of a map opened by ``from_id`` (a loaded object's maps close with it)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    @property
    def id(self) -> int:
        """The map's kernel id (as bpftool shows it)."""
        info = (ctypes.c_uint32 * 24)()  # struct bpf_map_info starts with type, id
        size = ctypes.c_uint32(ctypes.sizeof(info))
        _check(lib().bpf_obj_get_info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)),
               f"bpf_obj_get_info_by_fd({self.name})")
        return info[1]

    @property
    def value_buf_size(self) -> int:
        """Bytes a lookup returns: per-CPU maps hold one 8-byte aligned slot per possible CPU."""
        if self.percpu:
            return ((self.value_size + 7) & ~7) * num_possible_cpus()
        return self.value_size

    def update(self, key: bytes | ctypes.Array | ctypes.Structure, value: bytes | ctypes.Array | ctypes.Structure, flags: int = BPF_ANY) -> None:
        _check(lib().bpf_map_update_elem(self.fd, _buf(key), _buf(value), flags),
               f"bpf_map_update_elem({self.name})")

    def lookup(self, key: bytes | ctypes.Array) -> bytes | None:
        out = ctypes.create_string_buffer(self.value_buf_size)
        ret = lib().bpf_map_lookup_elem(self.fd, _buf(key), out)
        if ret == -errno.ENOENT:
            return None
        _check(ret, f"bpf_map_lookup_elem({self.name})")
        return out.raw

    def delete(self, key: bytes | ctypes.Array) -> bool:
        ret = lib().bpf_map_delete_elem(self.fd, _buf(key))
        if ret == -errno.ENOENT:
            return False
        _check(ret, f"bpf_map_delete_elem({self.name})")
        return True

    def keys(self) -> Iterator[bytes]:
        key = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            ret = lib().bpf_map_get_next_key(self.fd, key, nxt)
            if ret == -errno.ENOENT:
                return
            _check(ret, f"bpf_map_get_next_key({self.name})")
            yield nxt.raw
            key = ctypes.create_string_buffer(nxt.raw, self.key_size)

    def count(self, batch: int = 65536) -> int:
        """Entries of a hash map, read in batches (``bpf_map_lookup_batch``: 1M entries in well under
        a second, where ``keys()`` walks them one system call each)."""
        keys = ctypes.create_string_buffer(self.key_size * batch)
        vals = ctypes.create_string_buffer(self.value_buf_size * batch)
        token_in, token_out = ctypes.create_string_buffer(8), ctypes.create_string_buffer(8)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        total, first = 0, True
        while True:
            n = ctypes.c_uint32(batch)
            ret = lib().bpf_map_lookup_batch(self.fd, None if first else token_in, token_out, keys, vals,
                                             ctypes.byref(n), ctypes.byref(opts))
            if ret < 0 and ret != -errno.ENOENT:  # ENOENT: the batch reached the end
                _check(ret, f"bpf_map_lookup_batch({self.name})")
            total += n.value
            if ret == -errno.ENOENT:
                return total
            ctypes.memmove(token_in, token_out, 8)
            first = False

    def update_batch(self, keys: bytes, values: bytes, count: int, flags: int = BPF_ANY,
                     enomem_retries: int = 0) -> int:
        """Insert ``count`` keys and values (concatenated) in one call; returns how many went in.

        ``enomem_retries``: a map that allocates per element (``BPF_F_NO_PREALLOC``, above all the
        per-CPU ones) can refuse with ENOMEM while the per-CPU allocator refills; the rest of the
        batch is then tried again after a pause, up to that many times in a row."""
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), flags, 0)
        done, failures = 0, 0
        kb, vb = len(keys) // count, len(values) // count
        while done < count:
            n = ctypes.c_uint32(count - done)
            ret = lib().bpf_map_update_batch(self.fd, _buf(keys[done * kb:]), _buf(values[done * vb:]),
                                             ctypes.byref(n), ctypes.byref(opts))
            done += n.value
            if ret == 0:
                break
            failures = 0 if n.value else failures + 1
            if ret != -errno.ENOMEM or failures > enomem_retries:
                _check(ret, f"bpf_map_update_batch({self.name})")
            time.sleep(0.001 * min(failures, 50))
        return done

    def array_values(self) -> list[bytes]:
        """Every value of an array map (per-CPU: every CPU's slots, as ``lookup`` returns them)."""
        n = self.max_entries
        keys = ctypes.create_string_buffer(4 * n)
        vals = ctypes.create_string_buffer(self.value_buf_size * n)
        out_batch = ctypes.c_uint32(0)
        count = ctypes.c_uint32(n)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        ret = lib().bpf_map_lookup_batch(self.fd, None, ctypes.byref(out_batch), keys, vals, ctypes.byref(count),
                                         ctypes.byref(opts))
        if ret < 0 and ret != -errno.ENOENT:  # ENOENT: the batch reached the end
            _check(ret, f"bpf_map_lookup_batch({self.name})")
        raw, size = vals.raw, self.value_buf_size
        return [raw[i * size:(i + 1) * size] for i in range(count.value)]

    def zero_all(self) -> None:
        """Set every entry of an array map to zero (one batch call)."""
        n = self.max_entries
        keys = b"".join(i.to_bytes(4, "little") for i in range(n))
        self.update_batch(keys, bytes(self.value_buf_size * n), n)

    def percpu_values(self, raw: bytes) -> list[bytes]:
        """Split a per-CPU lookup result into one value per CPU."""
        stride = (self.value_size + 7) & ~7
        return [raw[i * stride:i * stride + self.value_size] for i in range(len(raw) // stride)]

    def pin(self, path: str | Path) -> None:
        _check(lib().bpf_obj_pin(self.fd, str(path).encode()), f"bpf_obj_pin({self.name}, {path})")


class Program:
    """A BPF program of a loaded object."""

    def __init__(self, fd: int, name: str):
        self.fd, self.name = fd, name

    def test_run(self, data: bytes, repeat: int = 1, ctx: XdpMd | None = None,
                 data_out_size: int | None = None) -> TestRunResult:
        """Run the program on ``data`` (BPF_PROG_TEST_RUN) and return verdict, output, ns per run."""
        din = _buf(data)
        size_out = data_out_size if data_out_size is not None else len(data) + XDP_PACKET_HEADROOM
        dout = ctypes.create_string_buffer(max(size_out, 1))
        opts = BpfTestRunOpts()
        opts.sz = ctypes.sizeof(BpfTestRunOpts)
        opts.data_in = ctypes.cast(din, ctypes.c_void_p)
        opts.data_size_in = len(data)
        opts.data_out = ctypes.cast(dout, ctypes.c_void_p)
        opts.data_size_out = size_out
        opts.repeat = repeat
        if ctx is not None:
            opts.ctx_in = ctypes.cast(ctypes.pointer(ctx), ctypes.c_void_p)
            opts.ctx_size_in = ctypes.sizeof(ctx)
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)),
               f"bpf_prog_test_run_opts({self.name})")
        return TestRunResult(opts.retval, dout.raw[:opts.data_size_out], opts.duration)

    def run_live(self, data: bytes, repeat: int, ctx: XdpMd | None = None, batch_size: int = 0) -> int:
        """Run the program ``repeat`` times on live frames built from ``data`` (Linux >= 5.18).

        Each run gets a real frame: XDP_TX and XDP_REDIRECT really transmit. Returns the kernel's
        mean ns per run. The call blocks; the calling thread's CPU and network namespace apply.
        """
        din = _buf(data)
        opts = BpfTestRunOpts()
        opts.sz = ctypes.sizeof(BpfTestRunOpts)
        opts.data_in = ctypes.cast(din, ctypes.c_void_p)
        opts.data_size_in = len(data)
        opts.repeat = repeat
        opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES
        opts.batch_size = batch_size
        ctx = ctx or XdpMd(0, len(data), 0, 0, 0, 0)
        opts.ctx_in = ctypes.cast(ctypes.pointer(ctx), ctypes.c_void_p)
        opts.ctx_size_in = ctypes.sizeof(ctx)
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)),
               f"bpf_prog_test_run_opts({self.name}, live frames)")
        return opts.duration

    def info(self) -> BpfProgInfo:
        return prog_info(self.fd)

    def pin(self, path: str | Path) -> None:
        _check(lib().bpf_obj_pin(self.fd, str(path).encode()), f"bpf_obj_pin({self.name}, {path})")


def prog_info(fd: int) -> BpfProgInfo:
    """The kernel's bpf_prog_info of a program fd (id, name, run_cnt, run_time_ns ...)."""
    info = BpfProgInfo()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "bpf_obj_get_info_by_fd")
    return info


def prog_map_ids(fd: int) -> list[int]:
    """Kernel ids of the maps the program ``fd`` uses."""
    n = prog_info(fd).nr_map_ids
    ids = (ctypes.c_uint32 * max(n, 1))()
    info = BpfProgInfo()
    info.nr_map_ids, info.map_ids = n, ctypes.addressof(ids)
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "bpf_obj_get_info_by_fd(map ids)")
    return list(ids[:min(n, info.nr_map_ids)])


def map_info(fd: int) -> MapInfoBtf:
    """The kernel's bpf_map_info of a map fd (type, name, sizes, BTF ids)."""
    info = MapInfoBtf()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "bpf_obj_get_info_by_fd(map)")
    return info


def prog_from_id(prog_id: int) -> Program:
    """The program with kernel id ``prog_id``, opened by id (one another loader attached); the
    caller owns the fd (``os.close(prog.fd)``)."""
    fd = _check(lib().bpf_prog_get_fd_by_id(prog_id), f"bpf_prog_get_fd_by_id({prog_id})")
    try:
        name = prog_info(fd).name.decode(errors="replace")
    except BaseException:
        os.close(fd)
        raise
    return Program(fd, name)


def prog_loaded(prog_id: int) -> bool:
    """Whether the program with kernel id ``prog_id`` is still loaded."""
    fd = lib().bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return False
    os.close(fd)
    return True


class BpfObject:
    """A BPF ELF object opened and loaded through libbpf. Close it (or use ``with``) to unload.

    ``max_entries`` overrides map sizes and ``reuse_maps`` shares maps (name -> fd) with another
    object before loading; ``attach_types`` sets a program's expected attach type (e.g. to run a
    program in a cpumap, ``BPF_XDP_CPUMAP``); ``rodata`` (or ``initial_values`` by map name) sets
    the ``const volatile`` globals, which the verifier then treats as constants.
    """

    def __init__(self, path: str | Path, max_entries: dict[str, int] | None = None,
                 reuse_maps: dict[str, int] | None = None, attach_types: dict[str, int] | None = None,
                 initial_values: dict[str, bytes] | None = None, rodata: bytes | ctypes.Structure | None = None,
                 before_load: Callable[[BpfObject], None] | None = None, verifier_log: bool = False):
        self.path = Path(path)
        self._obj = None
        self._links: list[int] = []
        self._log_bufs: list[ctypes.Array] = []
        if not self.path.exists():
            raise BpfError(f"open {self.path} (run `make bpf`)", errno.ENOENT)
        #: sha256 (hex) of the object file as it was opened (``perfkit.provenance``).
        self.sha256 = file_sha256(self.path)
        ctypes.set_errno(0)
        self._obj = lib().bpf_object__open_file(str(self.path).encode(), None)
        if not self._obj:
            raise BpfError(f"bpf_object__open_file({self.path})", ctypes.get_errno() or errno.EINVAL)
        try:
            for name, n in (max_entries or {}).items():
                _check(lib().bpf_map__set_max_entries(self._map_ptr(name), n), f"set_max_entries({name})")
            for name, fd in (reuse_maps or {}).items():
                _check(lib().bpf_map__reuse_fd(self._map_ptr(name), fd), f"bpf_map__reuse_fd({name})")
            initial = dict(initial_values or {})
            if rodata is not None:
                names = [n for n in self.map_names() if n.endswith(".rodata")]
                if len(names) != 1:
                    raise BpfError(f"{self.path.name}: expected one .rodata map, found {names}", errno.EINVAL)
                initial[names[0]] = bytes(rodata)
            for name, data in initial.items():
                buf = _buf(data)  # libbpf copies it
                _check(lib().bpf_map__set_initial_value(self._map_ptr(name), buf, len(buf)),
                       f"bpf_map__set_initial_value({name})")
            for name, t in (attach_types or {}).items():
                _check(lib().bpf_program__set_expected_attach_type(self._prog_ptr(name), t),
                       f"set_expected_attach_type({name})")
            if before_load is not None:
                before_load(self)
            if verifier_log:
                self._set_log_bufs()
            ret = lib().bpf_object__load(self._obj)
            if ret < 0 and verifier_log:
                raise VerifierError(f"bpf_object__load({self.path})", -ret, self._verifier_log())
            _check(ret, f"bpf_object__load({self.path}) (verifier log above)")
        except BaseException:
            self.close()
            raise

    def _set_log_bufs(self) -> None:
        """A log buffer per program: libbpf asks the verifier for its log only when a load fails."""
        p = None
        while True:
            p = lib().bpf_object__next_program(self._handle(), p)
            if not p:
                return
            buf = ctypes.create_string_buffer(VERIFIER_LOG_SIZE)
            self._log_bufs.append(buf)
            _check(lib().bpf_program__set_log_buf(p, buf, VERIFIER_LOG_SIZE), "bpf_program__set_log_buf")

    def _verifier_log(self) -> str:
        return "\n".join(b.value.decode(errors="replace").strip() for b in self._log_bufs if b.value)

    # -- before load (``before_load``) ---------------------------------------------------------------
    def btf_raw(self) -> bytes | None:
        """The object's BTF (as libbpf fixed it up on open: section sizes and variable offsets), raw;
        None when the object has none."""
        btf = lib().bpf_object__btf(self._handle())
        if not btf:
            return None
        size = ctypes.c_uint32(0)
        data = lib().btf__raw_data(btf, ctypes.byref(size))
        return ctypes.string_at(data, size.value) if data else None

    def initial_value(self, name: str) -> bytes:
        """The initial contents of a global-data map (``.rodata``, ``.data``, ``.bss``)."""
        size = ctypes.c_size_t(0)
        data = lib().bpf_map__initial_value(self._map_ptr(name), ctypes.byref(size))
        return ctypes.string_at(data, size.value) if data else b""

    def set_initial_value(self, name: str, data: bytes) -> None:
        buf = _buf(data)  # libbpf copies it
        _check(lib().bpf_map__set_initial_value(self._map_ptr(name), buf, len(buf)),
               f"bpf_map__set_initial_value({name})")

    def map_type(self, name: str) -> int:
        """enum bpf_map_type of map ``name``."""
        return lib().bpf_map__type(self._map_ptr(name))

    def set_expected_attach_type(self, name: str, attach_type: int) -> None:
        _check(lib().bpf_program__set_expected_attach_type(self._prog_ptr(name), attach_type),
               f"set_expected_attach_type({name})")

    def map_btf_ids(self, name: str) -> tuple[int, int]:
        """BTF type ids of map ``name``'s key and value (0: not declared in BTF)."""
        p = self._map_ptr(name)
        return lib().bpf_map__btf_key_type_id(p), lib().bpf_map__btf_value_type_id(p)

    @classmethod
    def load(cls, path: str | Path, **kw: object) -> BpfObject:
        return cls(path, **kw)  # type: ignore[arg-type]

    def _handle(self) -> int:
        """The libbpf object; an error once closed (libbpf would dereference the NULL)."""
        if not self._obj:
            raise BpfError(f"{self.path.name} is closed", errno.EBADF)
        return self._obj

    def _map_ptr(self, name: str) -> int:
        p = lib().bpf_object__find_map_by_name(self._handle(), name.encode())
        if not p:
            raise BpfError(f"map {name!r} not in {self.path.name} (maps: {', '.join(self.map_names())})",
                           errno.ENOENT)
        return p

    def _prog_ptr(self, name: str) -> int:
        p = lib().bpf_object__find_program_by_name(self._handle(), name.encode())
        if not p:
            raise BpfError(f"program {name!r} not in {self.path.name}", errno.ENOENT)
        return p

    def map_names(self) -> list[str]:
        names, p = [], None
        while True:
            p = lib().bpf_object__next_map(self._handle(), p)
            if not p:
                return names
            names.append(lib().bpf_map__name(p).decode())

    def program_names(self) -> list[str]:
        names, p = [], None
        while True:
            p = lib().bpf_object__next_program(self._handle(), p)
            if not p:
                return names
            names.append(lib().bpf_program__name(p).decode())

    def map(self, name: str) -> Map:
        p = self._map_ptr(name)
        # BPF_MAP_TYPE_PERCPU_HASH=5, PERCPU_ARRAY=6, LRU_PERCPU_HASH=10
        percpu = lib().bpf_map__type(p) in PERCPU_MAP_TYPES
        return Map(lib().bpf_map__fd(p), name, lib().bpf_map__key_size(p), lib().bpf_map__value_size(p),
                   lib().bpf_map__max_entries(p), percpu)

    def program(self, name: str) -> Program:
        return Program(_check(lib().bpf_program__fd(self._prog_ptr(name)), f"bpf_program__fd({name})"), name)

    def attach(self, name: str) -> None:
        """Attach a tracing program (``tp_btf/...``) as its section says; detached on ``close``."""
        ctypes.set_errno(0)
        link = lib().bpf_program__attach(self._prog_ptr(name))
        if not link:
            raise BpfError(f"bpf_program__attach({name})", ctypes.get_errno() or errno.EINVAL)
        self._links.append(link)

    def close(self) -> None:
        # Each pointer is dropped before it is freed: Ctrl-C or SIGTERM raise between any two calls,
        # and a pointer freed but still held would be freed again by the next close or __del__ (a
        # double free, seen as a SIGSEGV at exit). An interrupt can at worst leak one until the
        # process exits (a leaked tracing link goes on running its program until then).
        links = getattr(self, "_links", [])
        while links:
            lib().bpf_link__destroy(links.pop())
        obj, self._obj = getattr(self, "_obj", None), None
        if obj:
            lib().bpf_object__close(obj)

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def xdp_attach(ifindex: int, prog_fd: int, mode: str = "native") -> None:
    """Attach an XDP program to ``ifindex`` of the calling thread's network namespace."""
    flags = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE, "auto": 0}[mode]
    _check(lib().bpf_xdp_attach(ifindex, prog_fd, flags, None), f"bpf_xdp_attach(ifindex {ifindex}, {mode})")


def xdp_prog_id(ifindex: int, mode: str = "native") -> int:
    """The id of the XDP program attached to ``ifindex`` in ``mode`` (0: none)."""
    flags = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}[mode]
    prog_id = ctypes.c_uint32(0)
    _check(lib().bpf_xdp_query_id(ifindex, flags, ctypes.byref(prog_id)), f"bpf_xdp_query_id(ifindex {ifindex})")
    return prog_id.value


def xdp_detach(ifindex: int, mode: str = "native") -> None:
    """Detach the XDP program of ``ifindex`` (in ``mode``) in the calling thread's network namespace."""
    flags = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}[mode]
    _check(lib().bpf_xdp_detach(ifindex, flags, None), f"bpf_xdp_detach(ifindex {ifindex}, {mode})")


#: ``ring_buffer_sample_fn``. The only callback from C into Python in perfkit (libbpf's print callback
#: is left at its default, which writes to stderr in C).
_RINGBUF_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class RingBuffer:
    """Reader of a BPF_MAP_TYPE_RINGBUF map: ``drain()`` returns the records submitted so far.

    libbpf calls a Python function (a ctypes callback) for each record, and an exception raised
    there would be printed and dropped by ctypes, not raised: a stop (Ctrl-C, SIGTERM) that landed
    in it was lost (issue 22). So ``drain`` consumes inside ``perfkit.stop.deferred()`` (perfkit's
    handlers keep the stop until ``ring_buffer__consume`` returns, then it is raised), and the
    callback hands anything raised in it (another handler's ``KeyboardInterrupt``, a MemoryError)
    to ``drain``, which raises it once libbpf has returned.
    """

    def __init__(self, m: Map):
        self._records: list[bytes] = []
        self._error: BaseException | None = None

        def _cb(_ctx: int, data: int, size: int) -> int:
            try:
                self._records.append(ctypes.string_at(data, size))
            except BaseException as err:  # noqa: BLE001 - ctypes would drop it: drain raises it
                self._error = err
                return -1  # libbpf stops consuming (this record is lost: drain raises anyway)
            return 0

        self._cb = _RINGBUF_CB(_cb)  # keep a reference: libbpf calls it later
        ctypes.set_errno(0)
        self._rb = lib().ring_buffer__new(m.fd, ctypes.cast(self._cb, ctypes.c_void_p), None, None)
        if not self._rb:
            raise BpfError(f"ring_buffer__new({m.name})", ctypes.get_errno() or errno.EINVAL)

    def drain(self) -> list[bytes]:
        if not self._rb:  # libbpf would dereference the NULL
            raise BpfError("ring_buffer__consume: the ring buffer is closed", errno.EBADF)
        self._error = None
        with stop.deferred():  # no stop raised inside the callbacks; raised when consume returns
            ret = lib().ring_buffer__consume(self._rb)
        err, self._error = self._error, None
        if err is not None:
            raise err
        _check(ret, "ring_buffer__consume")
        out, self._records = self._records, []
        return out

    def close(self) -> None:
        rb, self._rb = self._rb, None  # dropped before it is freed: see BpfObject.close
        if rb:
            lib().ring_buffer__free(rb)


class BpfStats:
    """Kernel BPF run-time statistics on while this object is open (BPF_ENABLE_STATS).

    The kernel turns them off again when the fd closes, even if the process dies, so
    ``kernel.bpf_stats_enabled`` is always restored.
    """

    def __init__(self) -> None:
        self.fd = _check(lib().bpf_enable_stats(BPF_STATS_RUN_TIME), "bpf_enable_stats")

    def close(self) -> None:
        fd, self.fd = self.fd, -1  # dropped first: closed twice, the number may be another file's
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> BpfStats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
