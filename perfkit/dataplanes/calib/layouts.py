"""The Python mirror of ``bpf/include/calib_kern_user.h``, checked against BTF by the layout tests."""
from __future__ import annotations

import enum

from perfkit.layouts import MAC, Struct, u32, u64

CALIB_MAX_WORK = 1 << 20


class calib_config(Struct):
    _fields_ = [("egress_ifindex", u32), ("work", u32), ("src_mac", MAC), ("dst_mac", MAC), ("drop_every", u32)]


class calib_stat_rec(Struct):
    _fields_ = [("packets", u64), ("bytes", u64), ("iterations", u64), ("digest", u64)]


class CalibStat(enum.IntEnum):
    """enum calib_stat: what happened to a packet (index of the calib_stats array)."""

    CALIB_FWD = 0
    CALIB_PASS = 1
    CALIB_DROP_TRUNCATED = 2
    CALIB_DROP_NO_EGRESS = 3
    CALIB_DROP_INTERNAL = 4
    CALIB_DROP_EVERY = 5
    CALIB_STAT_MAX = 6

    @property
    def label(self) -> str:
        """Short lower-case name used in results and metrics: ``drop_truncated``. The forwarding one
        keeps its prefix (``calib_fwd``): generic modules may not name a dataplane's forwarding
        counters (``tests/test_seam.py``), and a bare ``fwd`` is a word they might well use."""
        return "calib_fwd" if self is CalibStat.CALIB_FWD else self.name.removeprefix("CALIB_").lower()


#: Every mirrored struct, by C name.
STRUCTS: dict[str, type[Struct]] = {cls.__name__: cls for cls in (calib_config, calib_stat_rec)}
#: Every mirrored enum, by C name.
ENUMS: dict[str, type[enum.IntEnum]] = {"calib_stat": CalibStat}
#: The headers mirrored here (the layout tests compile them).
HEADERS = ("calib_kern_user.h",)
