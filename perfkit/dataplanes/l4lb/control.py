"""Control plane of the L4 load balancer (``bpf/l4lb.bpf.c``): load it, configure it, install VIPs
with their reals and Maglev tables, read its counters.

Reals get a global index (1 upwards; 0 means "no real") the first time a VIP uses them, as in
Katran, so a real shared by VIPs has one ``real_stats`` entry. A VIP's table is rewritten whole
(one batch update of ``L4LB_RING_SIZE`` entries) whenever its reals change.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from perfkit.dataplanes.l4lb.config import L4lbConfig, Vip, be32
from perfkit.dataplanes.l4lb.layouts import (L4LB_MAX_REALS, L4LB_MAX_VIPS, L4LB_NO_REAL, L4LB_RING_SIZE,
                                             L4lbStat, l4lb_stat_rec, real_def, vip_meta)
from perfkit.dataplanes.l4lb.maglev import Pool
from perfkit.errors import ConfigError
from perfkit.libbpf import BpfObject, Map, Program
from perfkit.paths import BUILD_DIR

__all__ = ["Counters", "L4lb", "L4lbConfig", "Real", "Vip"]


@dataclass(frozen=True)
class Real:
    """A backend server of a VIP."""

    addr: str
    weight: int = 1
    """Share of the VIP's table relative to the other reals (Katran-style), >= 0."""


@dataclass
class Counters:
    """Packets and bytes summed over CPUs."""

    packets: int = 0
    bytes: int = 0
    """Frame bytes as received."""


def _sum(m: Map, raw: bytes | None) -> Counters:
    recs = [l4lb_stat_rec.from_bytes(v) for v in m.percpu_values(raw or b"")]
    return Counters(sum(r.packets for r in recs), sum(r.bytes for r in recs))


@dataclass
class L4lb:
    """A loaded load balancer. ``L4lb.load()`` then ``configure()`` and ``add_vip()``."""

    obj: BpfObject
    max_vips: int = L4LB_MAX_VIPS
    max_reals: int = L4LB_MAX_REALS
    config: L4lbConfig = field(default_factory=L4lbConfig)
    pools: dict[Vip, Pool] = field(default_factory=dict)
    """Each VIP's reals and table, as installed (what the reference model takes)."""
    vip_nums: dict[Vip, int] = field(default_factory=dict)
    real_index: dict[str, int] = field(default_factory=dict)
    """Real address -> its index in ``reals`` and ``real_stats``."""

    @classmethod
    def load(cls, path: Path | str | None = None, max_vips: int = L4LB_MAX_VIPS, attach_type: int | None = None,
             max_reals: int = L4LB_MAX_REALS) -> L4lb:
        """Load ``build/bpf/l4lb.o`` with room for ``max_vips`` tables of ``L4LB_RING_SIZE`` entries
        (4 bytes each: 256 KiB per VIP); ``attach_type=libbpf.BPF_XDP_CPUMAP`` to run it in a cpumap."""
        if not 1 <= max_vips <= 4096:
            raise ConfigError("max_vips", max_vips, "1 .. 4096")
        if not 2 <= max_reals <= 1 << 20:
            raise ConfigError("max_reals", max_reals, f"2 .. {1 << 20}")
        path = Path(path) if path else BUILD_DIR / "l4lb.o"
        sizes = {"vips": max_vips, "vip_stats": max_vips, "ch_rings": max_vips * L4LB_RING_SIZE,
                 "reals": max_reals, "real_stats": max_reals}
        obj = BpfObject(path, max_entries=sizes,
                        attach_types={"xdp_l4lb": attach_type} if attach_type is not None else None)
        lb = cls(obj, max_vips, max_reals)
        lb.configure(lb.config)
        return lb

    @property
    def program(self) -> Program:
        return self.obj.program("xdp_l4lb")

    def map(self, name: str) -> Map:
        return self.obj.map(name)

    def configure(self, config: L4lbConfig) -> None:
        self.map("l4lb_config").update(struct.pack("=I", 0), config.to_struct())
        self.config = config

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
        meta = vip_meta()
        meta.vip_num = self.vip_nums[vip]
        self.map("vips").update(vip.to_struct(), meta)
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
        self.map("vips").delete(vip.to_struct())
        del self.pools[vip], self.vip_nums[vip]

    def _real_index(self, addr: str) -> int:
        if addr not in self.real_index:
            idx = len(self.real_index) + 1  # 0 is L4LB_NO_REAL
            if idx >= self.max_reals:
                raise ConfigError("reals", idx, f"at most max_reals - 1 ({self.max_reals - 1})")
            rd = real_def()
            rd.addr = be32(addr)
            self.map("reals").update(struct.pack("=I", idx), rd)
            self.real_index[addr] = idx
        return self.real_index[addr]

    def _write_table(self, vip: Vip, pool: Pool) -> None:
        idx = np.array([self._real_index(a) for a in pool.reals] or [L4LB_NO_REAL], dtype=np.uint32)
        table = pool.table
        values = idx[table] if len(table) else np.full(L4LB_RING_SIZE, L4LB_NO_REAL, dtype=np.uint32)
        base = self.vip_nums[vip] * L4LB_RING_SIZE
        keys = np.arange(base, base + L4LB_RING_SIZE, dtype=np.uint32)
        self.map("ch_rings").update_batch(keys.tobytes(), values.astype(np.uint32).tobytes(), L4LB_RING_SIZE)
        self.pools[vip] = pool

    # -- counters ------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Counters]:
        """What happened to packets so far, by ``L4lbStat.label``, summed over CPUs."""
        m = self.map("l4lb_stats")
        return {s.label: _sum(m, m.lookup(struct.pack("=I", int(s)))) for s in L4lbStat
                if s is not L4lbStat.L4LB_STAT_MAX}

    def vip_stats(self) -> dict[Vip, Counters]:
        """Forwarded packets per installed VIP."""
        m = self.map("vip_stats")
        return {v: _sum(m, m.lookup(struct.pack("=I", n))) for v, n in self.vip_nums.items()}

    def real_stats(self) -> dict[str, Counters]:
        """Forwarded packets per real address (over all VIPs)."""
        m = self.map("real_stats")
        return {a: _sum(m, m.lookup(struct.pack("=I", i))) for a, i in self.real_index.items()}

    def close(self) -> None:
        self.obj.close()

    def __enter__(self) -> L4lb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
