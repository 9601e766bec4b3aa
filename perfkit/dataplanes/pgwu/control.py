"""Control plane of the PGW-U dataplane (``bpf/pgwu.bpf.c``): load it, configure it, fill sessions,
read its counters.

Addressing plan (all inside the RFC 2544 benchmarking range 198.18.0.0/15):

- UE addresses: 198.18.0.0 upwards, ``UE_POOL`` of them per tenant; a tenant is an SGi VLAN, so
  more sessions than ``UE_POOL`` need several tenants (seed 001 ran 1000 tenants, 1M bearers:
  ``SessionPlan`` spreads them over ``SEED_TENANTS`` tenants, see there for the layout);
- SGW addresses: 198.19.254.1 .. 198.19.254.100 (100 SGWs, as in seed 001);
- testbed ports and our own GTP-U / SGi addresses: 198.19.255.0/24 (``perfkit.testbed.topology``):
  S5/S1-U is the DUT's port ``a``, SGi its port ``b``.
"""
from __future__ import annotations

import ctypes
import functools
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Iterator

import numpy as np

from perfkit.dataplanes.pgwu.layouts import (PGWU_F_UDP_CSUM, PGWU_F_XDP_TX, SESSION_TABLES, PgwuStat, pgwu_config,
                                             pgwu_dl_key, pgwu_dl_session, pgwu_stat_rec, pgwu_ul_session)
from perfkit.dataplane import BpfControl
from perfkit.errors import ConfigError
from perfkit.netaddr import be32 as _be32, int2ip, ip2int, mac_bytes as _mac_bytes
from perfkit.testbed.bpfbuild import Built, built_with
from perfkit.testbed.topology import PORT_ADDRS, PORT_MACS

UE_BASE = ip2int("198.18.0.0")
#: UE addresses per tenant: 198.18.0.0 .. 198.19.253.255.
UE_POOL = 2 * 65536 - 512
SGW_BASE = ip2int("198.19.254.1")
SGW_COUNT = 100
UL_TEID_BASE = 0x10000000
DL_TEID_BASE = 0x20000000
TENANT_VLAN_BASE = 100
#: Tenants (SGi VLANs) that more sessions than one tenant's ``UE_POOL`` are spread over: seed 001's.
SEED_TENANTS = 1000
#: With several tenants a TEID is base + tenant << 16 + UE index: the UE index is its low 16 bits.
TEID_UE_BITS = 16
#: ENOMEM answers in a row that a session insert waits out (``Map.update_batch``): a per-CPU table
#: without preallocation refuses while the per-CPU allocator refills.
ENOMEM_RETRIES = 200
#: Default capacity of each session map; 1M sessions (seed 001) fit.
DEFAULT_MAX_SESSIONS = 1 << 20


@dataclass(frozen=True)
class Session:
    """One bearer: what the PGW-U needs in both directions."""

    ul_teid: int
    """TEID we allocated: the SGW sends uplink G-PDUs with it."""
    dl_teid: int
    """TEID the SGW allocated: we encapsulate downlink packets with it."""
    ue_addr: str
    sgw_addr: str
    tenant_vlan: int = 0
    """The tenant's SGi VLAN id (0 = untagged)."""


@dataclass(frozen=True)
class SessionPlan:
    """``count`` sessions laid out deterministically over ``tenants`` tenants (SGi VLANs).

    Session i is UE number ``u = i mod U`` of tenant ``t = i mod T``, where T is ``tenant_count``
    and U ``ue_count``, the smallest number of UE addresses per tenant >= count / T that is coprime
    to T. By the Chinese remainder theorem, i = 0 .. U*T - 1 gives every (u, t) pair exactly once,
    so UE addresses repeat across tenants, as in a multi-APN PGW, and a traffic generator can walk
    every session with two counters stepping together, one wrapping at U and one at T, writing
    each header field from one of them (``PgwuTraffic.field_engine``):

    - UE address ``UE_BASE + u``; SGi VLAN ``TENANT_VLAN_BASE + t`` (tagged plans, else untagged);
    - TEIDs ``UL_TEID_BASE + (t << 16) + u`` (uplink) and ``DL_TEID_BASE + (t << 16) + u``
      (downlink): two 16-bit halves, tenant and UE, so u < 65536 with several tenants;
    - SGW ``SGW_BASE + i mod SGW_COUNT`` (only in the DUT's table).

    With one tenant (up to ``UE_POOL`` sessions) this is session i = UE i, TEID base + i: the
    layout perfkit always had. Beyond, ``SEED_TENANTS`` tenants: 1000 tenants x 1001 UEs =
    1,001,000 sessions is seed 001's "1M bearers over 1000 tenant VLANs". A count that is not
    U*T (``full``) fills the grid in index order; flows can then not walk it all
    (``PgwuTraffic`` refuses and names the nearest full counts).
    """

    count: int = 1
    tenants: int = 0
    """0: one tenant up to ``UE_POOL`` sessions, else ``SEED_TENANTS``."""
    tagged: bool = False
    """Whether tenants are VLAN-tagged on the SGi side (needed for more than one tenant)."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError("sessions", self.count, "an integer >= 1")
        if self.count > DEFAULT_MAX_SESSIONS * 4:
            raise ConfigError("sessions", self.count, f"1 .. {DEFAULT_MAX_SESSIONS * 4}")
        if self.tenants < 0:
            raise ConfigError("tenants", self.tenants, "0 (automatic) or an integer >= 1")
        tenants = self.tenant_count
        if tenants > 1 and not self.tagged:
            if self.tenants:
                raise ConfigError("tenants", self.tenants, "1 when untagged (tenants are SGi VLANs: use --vlan)")
            raise ConfigError("sessions", self.count,
                              f"at most {UE_POOL} untagged (more need tenant VLANs: use --vlan)")
        if tenants > 4094 - TENANT_VLAN_BASE:
            raise ConfigError("tenants", tenants, f"1 .. {4094 - TENANT_VLAN_BASE}")
        if tenants > self.count:
            raise ConfigError("tenants", tenants, f"1 .. sessions ({self.count})")
        ues = self.ue_count
        if tenants == 1 and ues > UE_POOL:
            raise ConfigError("sessions", self.count, f"at most {UE_POOL} per tenant")
        if tenants > 1 and ues > 1 << TEID_UE_BITS:
            raise ConfigError("sessions", self.count,
                              f"at most {1 << TEID_UE_BITS} UE addresses per tenant over {tenants} tenants "
                              f"(the UE index is the TEID's low {TEID_UE_BITS} bits)")

    @property
    def tenant_count(self) -> int:
        """T: the tenants (SGi VLANs) sessions are spread over."""
        return self.tenants or (1 if self.count <= UE_POOL else SEED_TENANTS)

    @functools.cached_property
    def ue_count(self) -> int:
        """U: UE addresses per tenant, coprime to ``tenant_count``."""
        return ue_count(self.count, self.tenant_count)

    @property
    def teid_stride(self) -> int:
        """Slots per block of our uplink TEIDs (``teid_array``): a TEID's low 16 bits are its slot,
        the bits above its block, so with several tenants block = tenant and slot = UE index."""
        return self.ue_count if self.tenant_count > 1 else 1 << TEID_UE_BITS

    @property
    def teid_slots(self) -> int:
        """Entries a ``teid_array`` needs: one per (UE, tenant) pair."""
        return self.ue_count * self.tenant_count

    @property
    def full(self) -> bool:
        """Whether the sessions are every (UE, tenant) pair: then flows can walk them all."""
        return self.count == self.ue_count * self.tenant_count

    def full_counts_near(self) -> list[int]:
        """The full session counts (U*T, same tenants) next to ``count``: below, if any, and above."""
        tenants = self.tenant_count
        below = self.count // tenants
        while below > 1 and math.gcd(below, tenants) != 1:
            below -= 1
        out = []
        for ues in (below, ue_count(self.count, tenants)):
            try:
                plan = SessionPlan(ues * tenants, self.tenants, self.tagged)
            except ConfigError:
                continue
            if plan.full and plan.tenant_count == tenants and plan.count not in out:
                out.append(plan.count)
        return out

    def index(self, ue: int, tenant: int) -> int | None:
        """The session of UE number ``ue`` in tenant number ``tenant``, or None."""
        ues, tenants = self.ue_count, self.tenant_count
        if not (0 <= ue < ues and 0 <= tenant < tenants):
            return None
        i = ue + ues * ((tenant - ue) * _inverse(ues, tenants) % tenants) if tenants > 1 else ue
        return i if i < self.count else None

    def session(self, i: int) -> Session:
        if not 0 <= i < self.count:
            raise IndexError(f"session {i} of {self.count}")
        ue, tenant = i % self.ue_count, i % self.tenant_count
        key = (tenant << TEID_UE_BITS) + ue
        return Session(ul_teid=UL_TEID_BASE + key, dl_teid=DL_TEID_BASE + key,
                       ue_addr=int2ip(UE_BASE + ue), sgw_addr=int2ip(SGW_BASE + i % SGW_COUNT),
                       tenant_vlan=(TENANT_VLAN_BASE + tenant) if self.tagged else 0)

    def __iter__(self) -> Iterator[Session]:
        return (self.session(i) for i in range(self.count))

    def _by_teid(self, key: int) -> Session | None:
        if key < 0:
            return None
        ue, tenant = (key, 0) if self.tenant_count == 1 else (key & ((1 << TEID_UE_BITS) - 1), key >> TEID_UE_BITS)
        i = self.index(ue, tenant)
        return None if i is None else self.session(i)

    def by_ul_teid(self, teid: int) -> Session | None:
        """The session whose uplink TEID is ``teid`` (arithmetic, no table)."""
        return self._by_teid(teid - UL_TEID_BASE)

    def by_dl_teid(self, teid: int) -> Session | None:
        """The session whose downlink TEID (the SGW's) is ``teid``."""
        return self._by_teid(teid - DL_TEID_BASE)

    def by_dl_key(self, ue_addr: str, vlan: int) -> Session | None:
        """The session of UE ``ue_addr`` in the tenant of SGi VLAN ``vlan`` (0 = untagged)."""
        tenant = vlan - TENANT_VLAN_BASE if self.tagged else (0 if vlan == 0 else -1)
        i = self.index(ip2int(ue_addr) - UE_BASE, tenant)
        return None if i is None else self.session(i)


def ue_count(count: int, tenants: int) -> int:
    """The fewest UE addresses per tenant, coprime to ``tenants``, that hold ``count`` sessions."""
    ues = -(-count // tenants)
    while math.gcd(ues, tenants) != 1:
        ues += 1
    return ues


@functools.lru_cache(maxsize=64)
def _inverse(ues: int, tenants: int) -> int:
    return pow(ues, -1, tenants)


@dataclass(frozen=True)
class PgwuConfig:
    """Run-time configuration (``struct pgwu_config``)."""

    s5_ifindex: int = 0
    sgi_ifindex: int = 0
    gtpu_addr: str = PORT_ADDRS["a"]
    sgi_addr: str = PORT_ADDRS["b"]
    s5_src_mac: str = PORT_MACS["a"]
    s5_dst_mac: str = PORT_MACS["p0"]
    sgi_src_mac: str = PORT_MACS["b"]
    sgi_dst_mac: str = PORT_MACS["p1"]
    s5_vlan: int = 0
    s5_mtu: int = 0
    udp_csum: bool = False
    xdp_tx: bool = False
    teid_stride: int = 1 << TEID_UE_BITS
    """Slots per TEID block (``SessionPlan.teid_stride``): how a ``teid_array`` table indexes."""

    def __post_init__(self) -> None:
        if not 1 <= self.teid_stride <= 1 << TEID_UE_BITS:
            raise ConfigError("teid_stride", self.teid_stride, f"1 .. {1 << TEID_UE_BITS}")
        if not 0 <= self.s5_vlan <= 4094:
            raise ConfigError("s5_vlan", self.s5_vlan, "0 (untagged) .. 4094")
        if not (self.s5_mtu == 0 or 68 <= self.s5_mtu <= 65535):
            raise ConfigError("s5_mtu", self.s5_mtu, "0 (unchecked) or 68 .. 65535")

    def to_struct(self) -> pgwu_config:
        c = pgwu_config()
        c.s5_ifindex, c.sgi_ifindex = self.s5_ifindex, self.sgi_ifindex
        c.gtpu_addr, c.sgi_addr = _be32(ip2int(self.gtpu_addr)), _be32(ip2int(self.sgi_addr))
        for name in ("s5_src_mac", "s5_dst_mac", "sgi_src_mac", "sgi_dst_mac"):
            ctypes.memmove(getattr(c, name), _mac_bytes(getattr(self, name)), 6)
        c.s5_vlan, c.s5_mtu = self.s5_vlan, self.s5_mtu
        c.flags = (PGWU_F_UDP_CSUM if self.udp_csum else 0) | (PGWU_F_XDP_TX if self.xdp_tx else 0)
        c.ul_teid_base, c.teid_stride = UL_TEID_BASE, self.teid_stride
        return c


def teid_index(ul_teid: np.ndarray, stride: int) -> np.ndarray:
    """The ``teid_array`` slot of each uplink TEID (as ``ul_session()`` in ``bpf/pgwu.bpf.c``)."""
    rel = (np.asarray(ul_teid, dtype=np.int64) - UL_TEID_BASE) & 0xFFFFFFFF
    return (rel >> TEID_UE_BITS) * stride + (rel & ((1 << TEID_UE_BITS) - 1))


def session_columns(sessions: SessionPlan | list[Session]) -> dict[str, np.ndarray]:
    """Sessions as columns of host-order integers (vectorised for a plan: 1M in milliseconds)."""
    if isinstance(sessions, SessionPlan):
        i = np.arange(sessions.count, dtype=np.int64)
        ue, tenant = i % sessions.ue_count, i % sessions.tenant_count
        key = (tenant << TEID_UE_BITS) + ue
        vlan = (TENANT_VLAN_BASE + tenant) if sessions.tagged else np.zeros_like(i)
        return {"ul_teid": UL_TEID_BASE + key, "dl_teid": DL_TEID_BASE + key, "ue_addr": UE_BASE + ue,
                "sgw_addr": SGW_BASE + i % SGW_COUNT, "tenant_vlan": vlan}
    return {"ul_teid": np.array([s.ul_teid for s in sessions], dtype=np.int64),
            "dl_teid": np.array([s.dl_teid for s in sessions], dtype=np.int64),
            "ue_addr": np.array([ip2int(s.ue_addr) for s in sessions], dtype=np.int64),
            "sgw_addr": np.array([ip2int(s.sgw_addr) for s in sessions], dtype=np.int64),
            "tenant_vlan": np.array([s.tenant_vlan for s in sessions], dtype=np.int64)}


@dataclass
class SessionCounters:
    """Per-session counters summed over CPUs."""

    packets: int = 0
    bytes: int = 0
    """Inner IPv4 bytes."""


@dataclass
class Pgwu(BpfControl):
    """A loaded PGW-U object. ``Pgwu.load()`` then ``configure()`` and ``add_sessions()``."""

    name: ClassVar[str] = "pgwu"
    object_file: ClassVar[Built] = Built("pgwu")
    entry: ClassVar[str] = "xdp_pgwu"
    config_map: ClassVar[str] = "pgwu_config"
    stats_map: ClassVar[str] = "pgwu_stats"
    stat: ClassVar[type[PgwuStat]] = PgwuStat
    stat_rec: ClassVar[type[pgwu_stat_rec]] = pgwu_stat_rec
    config: PgwuConfig = field(default_factory=PgwuConfig)
    table: str = "hash"
    """The session tables' design (``SESSION_TABLES``: the ``session_table`` build option)."""

    @classmethod
    def load(cls, path: Path | str | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS, cpumap: bool = False,
             table: str = "hash") -> Pgwu:
        """Load ``build/bpf/pgwu.o`` (or, for another ``table`` design, the program built with it) with
        room for ``max_sessions`` in each session table; ``cpumap``: to run it in a cpumap."""
        if table not in SESSION_TABLES:
            raise ConfigError("session_table", table, list(SESSION_TABLES))
        if path is None and table != "hash":
            path = built_with("pgwu", {"PGWU_SESSION_TABLE": SESSION_TABLES[table]})
        obj = cls.open(path, cpumap, max_entries={m: max_sessions for m in ("ul_sessions", "dl_sessions")})
        return cls(obj, table=table).start()

    # -- sessions --------------------------------------------------------------------------------
    def add_sessions(self, sessions: SessionPlan | list[Session], batch: int = 65536) -> int:
        """Install (or replace, counters reset) sessions in both tables; returns how many."""
        cols = session_columns(sessions)
        n = len(cols["ul_teid"])
        ul_key = cols["ul_teid"].astype(">u4")
        ul_val = np.zeros(n, dtype=np.dtype(pgwu_ul_session))
        ul_val["ue_addr"] = cols["ue_addr"].astype(">u4").view("<u4")
        ul_val["sgi_vlan"] = cols["tenant_vlan"]
        dl_key = np.zeros(n, dtype=np.dtype(pgwu_dl_key))
        dl_key["ue_addr"], dl_key["vlan"] = ul_val["ue_addr"], cols["tenant_vlan"]
        dl_val = np.zeros(n, dtype=np.dtype(pgwu_dl_session))
        dl_val["sgw_addr"] = cols["sgw_addr"].astype(">u4").view("<u4")
        dl_val["teid"] = cols["dl_teid"].astype(">u4").view("<u4")
        if self.table == "teid_array":
            ul_key = teid_index(cols["ul_teid"], self.config.teid_stride).astype("<u4")
        for m, keys, vals in ((self.map("ul_sessions"), ul_key, ul_val), (self.map("dl_sessions"), dl_key, dl_val)):
            if m.percpu:  # one copy of the value per possible CPU
                vals = np.repeat(vals, m.value_buf_size // vals.dtype.itemsize)
            per = len(vals) // n
            for lo in range(0, n, batch):
                k, v = keys[lo:lo + batch], vals[lo * per:(lo + batch) * per]
                m.update_batch(k.tobytes(), v.tobytes(), len(k), enomem_retries=ENOMEM_RETRIES)
        return n

    def ul_session(self, teid: int) -> tuple[str, int, SessionCounters] | None:
        """(UE address, tenant VLAN, uplink counters) of the session with ``teid``, or None."""
        m = self.map("ul_sessions")
        if self.table == "teid_array":
            slot = (teid - UL_TEID_BASE) & ((1 << TEID_UE_BITS) - 1)
            index = int(teid_index(np.array([teid]), self.config.teid_stride)[0])
            raw = m.lookup(struct.pack("=I", index)) if slot < self.config.teid_stride and index < m.max_entries else None
        else:
            raw = m.lookup(struct.pack("!I", teid))
        vals = [pgwu_ul_session.from_bytes(v) for v in (m.percpu_values(raw) if raw and m.percpu else [raw] if raw else [])]
        if not vals or not vals[0].ue_addr:
            return None
        return (int2ip(_be32(vals[0].ue_addr)), vals[0].sgi_vlan,
                SessionCounters(sum(v.packets for v in vals), sum(v.bytes for v in vals)))

    def dl_session(self, ue_addr: str, vlan: int = 0) -> tuple[str, int, SessionCounters] | None:
        """(SGW address, SGW TEID, downlink counters) of the session, or None."""
        m = self.map("dl_sessions")
        raw = m.lookup(pgwu_dl_key(_be32(ip2int(ue_addr)), vlan))
        if raw is None:
            return None
        vals = [pgwu_dl_session.from_bytes(v) for v in (m.percpu_values(raw) if m.percpu else [raw])]
        return (int2ip(_be32(vals[0].sgw_addr)), _be32(vals[0].teid),
                SessionCounters(sum(v.packets for v in vals), sum(v.bytes for v in vals)))

    def session_count(self) -> tuple[int, int]:
        """Sessions present in (ul_sessions, dl_sessions), read back from the kernel: entries of a
        hash table; slots of a ``teid_array`` that hold a session."""
        ul = self.map("ul_sessions")
        if self.table == "teid_array":
            values = np.frombuffer(b"".join(ul.array_values()), dtype=np.dtype(pgwu_ul_session))
            ul_count = int(np.count_nonzero(values["ue_addr"]))
        else:
            ul_count = ul.count()
        return ul_count, self.map("dl_sessions").count()
