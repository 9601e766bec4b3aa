"""Control plane of the L4 load balancer (``bpf/l4lb.bpf.c``): load it, configure it, install VIPs
with their reals and Maglev tables, read its counters.

VIPs live in an open-addressing table (the ``vips`` array map, ``struct vip_slot``): each in its
home slot (``hashing.vip_home``) or one of the next ``L4LB_VIP_PROBES - 1``, with no empty slot
between; a removed VIP's slot is marked ``L4LB_VIP_REMOVED`` (lookups go on past it) and reused by
the next VIP placed there. A slot is written in two steps, its VIP's configuration first and then its
key, so that a packet that races the update either misses the VIP or finds it complete.

Reals get a global index (1 upwards; 0 means "no real") the first time a VIP uses them, as in
Katran, so a real shared by VIPs has one ``real_stats`` entry. A VIP's table (``struct ch_ring``: a
16-bit real index per slot) is rewritten whole, in one map update, whenever its reals change.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from perfkit.dataplane import BpfControl
from perfkit.dataplanes.l4lb.config import L4lbConfig, Vip, be32_addr
from perfkit.dataplanes.l4lb.hashing import vip_home
from perfkit.dataplanes.l4lb.layouts import (L4LB_MAX_REALS, L4LB_VIP_F_MSS_CLAMP, L4LB_MAX_VIPS, L4LB_NO_REAL, L4LB_RING_SIZE,
                                             L4LB_VIP_PROBES, L4LB_VIP_REMOVED, L4lbStat, ch_ring, l4lb_consts,
                                             l4lb_stat_rec, real_def, vip_slot)
from perfkit.dataplanes.l4lb.maglev import Pool
from perfkit.errors import ConfigError
from perfkit.testbed.bpfbuild import Built
from perfkit.netaddr import ip2int

__all__ = ["L4lb", "L4lbConfig", "Real", "Vip"]


@dataclass(frozen=True)
class Real:
    """A backend server of a VIP."""

    addr: str
    weight: int = 1
    """Share of the VIP's table relative to the other reals (Katran-style), >= 0."""


def vip_table_slots(max_vips: int) -> int:
    """Slots of the VIP table for ``max_vips``: the power of two >= 4 per VIP, at least 16."""
    return max(16, 1 << (4 * max_vips - 1).bit_length())


@dataclass
class L4lb(BpfControl):
    """A loaded load balancer. ``L4lb.load()`` then ``configure()`` and ``add_vip()``; its counters
    (``stats``, ``vip_stats``, ``real_stats``) count packets and bytes (as received)."""

    name: ClassVar[str] = "l4lb"
    object_file: ClassVar[Built] = Built("l4lb")
    entry: ClassVar[str] = "xdp_l4lb"
    config_map: ClassVar[str] = "l4lb_config"
    stats_map: ClassVar[str] = "l4lb_stats"
    stat: ClassVar[type[L4lbStat]] = L4lbStat
    stat_rec: ClassVar[type[l4lb_stat_rec]] = l4lb_stat_rec
    config: L4lbConfig = field(default_factory=L4lbConfig)
    max_vips: int = L4LB_MAX_VIPS
    max_reals: int = L4LB_MAX_REALS
    pools: dict[Vip, Pool] = field(default_factory=dict)
    """Each VIP's reals and table, as installed (what the reference model takes)."""
    vip_nums: dict[Vip, int] = field(default_factory=dict)
    real_index: dict[str, int] = field(default_factory=dict)
    """Real address -> its index in ``reals`` and ``real_stats``."""
    vip_slots: int = 16
    """Slots of the VIP table (a power of two, at least 4 per VIP)."""
    slot_of: dict[Vip, int] = field(default_factory=dict)
    """Installed VIP -> its slot in the VIP table."""
    removed_slots: set[int] = field(default_factory=set)
    """Slots of the VIP table marked L4LB_VIP_REMOVED."""

    @classmethod
    def load(cls, path: Path | str | None = None, max_vips: int = L4LB_MAX_VIPS, cpumap: bool = False,
             max_reals: int = L4LB_MAX_REALS) -> L4lb:
        """Load ``build/bpf/l4lb.o`` with room for ``max_vips`` tables of ``L4LB_RING_SIZE`` entries
        (2 bytes each: 128 KiB per VIP) and ``max_reals - 1`` reals (at most 65535: table entries
        are 16 bits); ``cpumap``: to run it in a cpumap."""
        if not 1 <= max_vips <= 4096:
            raise ConfigError("max_vips", max_vips, "1 .. 4096")
        if not 2 <= max_reals <= 1 << 16:
            raise ConfigError("max_reals", max_reals, f"2 .. {1 << 16} (table entries are 16 bits)")
        slots = vip_table_slots(max_vips)
        sizes = {"vips": slots, "vip_stats": max_vips, "ch_rings": max_vips,
                 "reals": max_reals, "real_stats": max_reals}
        obj = cls.open(path, cpumap, max_entries=sizes, rodata=l4lb_consts(vip_mask=slots - 1))
        return cls(obj, max_vips=max_vips, max_reals=max_reals, vip_slots=slots).start()

    # -- VIPs and reals ----------------------------------------------------------------------------
    def add_vip(self, vip: Vip, reals: Sequence[Real] | Sequence[str], weights: Sequence[int] | None = None) -> Pool:
        """Install ``vip`` (or replace its reals) and write its Maglev table; returns its pool.

        ``reals`` are ``Real``s (their weights count) or addresses (``weights``, default all 1)."""
        addrs = [r.addr if isinstance(r, Real) else r for r in reals]
        if any(isinstance(r, Real) for r in reals):
            if weights is not None:
                raise ConfigError("weights", list(weights), "None when reals are Real (they carry weights)")
            weights = [r.weight if isinstance(r, Real) else 1 for r in reals]
        pool = Pool(tuple(addrs), None if weights is None else tuple(weights), L4LB_RING_SIZE)
        if vip not in self.vip_nums:
            free = sorted(set(range(self.max_vips)) - set(self.vip_nums.values()))
            if not free:
                raise ConfigError("vips", len(self.vip_nums) + 1, f"at most max_vips ({self.max_vips})")
            self.vip_nums[vip] = free[0]
        self._write_table(vip, pool)
        if vip not in self.slot_of:
            self._place(vip)
        return pool

    def remove_real(self, vip: Vip, real: Real | str) -> Pool:
        """Take ``real`` out of ``vip``'s table (Maglev moves about 1/N of its flows); returns the pool."""
        if vip not in self.pools:
            raise ConfigError("vip", vip, [str(v) for v in self.pools] or "none installed")
        pool = self.pools[vip].without(real.addr if isinstance(real, Real) else real)
        self._write_table(vip, pool)
        return pool

    def remove_vip(self, vip: Vip) -> None:
        if vip not in self.pools:
            raise ConfigError("vip", vip, [str(v) for v in self.pools] or "none installed")
        slot = self.slot_of.pop(vip)
        gone = vip_slot()
        gone.key.proto = L4LB_VIP_REMOVED
        self.map("vips").update(struct.pack("=I", slot), gone)
        self.removed_slots.add(slot)
        del self.pools[vip], self.vip_nums[vip]

    def _place(self, vip: Vip) -> None:
        """Put ``vip`` in the first free (never used or removed) slot of its probe sequence."""
        home = vip_home(ip2int(vip.addr), vip.port, vip.proto_num)
        used = set(self.slot_of.values())
        for i in range(L4LB_VIP_PROBES):
            slot = (home + i) & (self.vip_slots - 1)
            if slot not in used:
                break
        else:
            raise ConfigError("vips", vip, f"a VIP whose {L4LB_VIP_PROBES} slots of the VIP table are not all taken "
                              f"({len(self.slot_of)} VIPs in {self.vip_slots} slots)")
        entry = vip_slot()
        entry.meta.vip_num = self.vip_nums[vip]
        entry.meta.flags = L4LB_VIP_F_MSS_CLAMP if vip.mss_clamp else 0
        if slot in self.removed_slots:
            entry.key.proto = L4LB_VIP_REMOVED
        m, k = self.map("vips"), struct.pack("=I", slot)
        m.update(k, entry)  # the configuration first ...
        entry.key = vip.to_struct()
        m.update(k, entry)  # ... then the key that makes it reachable
        self.removed_slots.discard(slot)
        self.slot_of[vip] = slot

    def _real_index(self, addr: str) -> int:
        if addr not in self.real_index:
            idx = len(self.real_index) + 1  # 0 is L4LB_NO_REAL
            if idx >= self.max_reals:
                raise ConfigError("reals", idx, f"at most max_reals - 1 ({self.max_reals - 1})")
            rd = real_def()
            rd.addr = be32_addr(addr)
            self.map("reals").update(struct.pack("=I", idx), rd)
            self.real_index[addr] = idx
        return self.real_index[addr]

    def _write_table(self, vip: Vip, pool: Pool) -> None:
        if pool.size != L4LB_RING_SIZE:
            raise ConfigError("size", pool.size, f"{L4LB_RING_SIZE} (the program's L4LB_RING_SIZE)")
        idx = np.array([self._real_index(a) for a in pool.reals] or [L4LB_NO_REAL], dtype=np.uint16)
        table = pool.table
        values = idx[table] if len(table) else np.full(L4LB_RING_SIZE, L4LB_NO_REAL, dtype=np.uint16)
        assert ctypes.sizeof(ch_ring) == values.nbytes
        self.map("ch_rings").update(struct.pack("=I", self.vip_nums[vip]), values.astype("=u2").tobytes())
        self.pools[vip] = pool

    # -- counters ------------------------------------------------------------------------------------
    def vip_stats(self) -> dict[Vip, l4lb_stat_rec]:
        """Forwarded packets per installed VIP."""
        return {v: self.summed("vip_stats", n) for v, n in self.vip_nums.items()}

    def real_stats(self) -> dict[str, l4lb_stat_rec]:
        """Forwarded packets per real address (over all VIPs)."""
        return {a: self.summed("real_stats", i) for a, i in self.real_index.items()}
