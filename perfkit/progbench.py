"""``prog-bench``: the kernel's own cost of a dataplane program per packet (BPF_PROG_TEST_RUN repeat).

How it measures (so that every run takes the intended path):

1. ``bpf/bench.bpf.c`` wraps the program: before each run it moves the head back, restores the
   frame's first bytes from a template and writes the next session's TEID / UE address, then
   tail-calls the target. Without this, repeat runs would process their own output.
2. The baseline is the same harness tail-calling ``bpf/drop.bpf.c`` (returns XDP_DROP), measured
   in the same run, alternating round by round; net cost = the median of paired differences.
3. The path is proven: the target's forwarding counter must rise by exactly the number of measured
   runs and no other counter may move; the last output must be the reference model's.
"""
from __future__ import annotations

import os
import statistics
import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from perfkit.errors import ConfigError, PerfkitError
from perfkit.layouts import bench_config, bench_key, bench_template, BENCH_RESTORE_MAX
from perfkit.libbpf import BpfObject
from perfkit.pgwu import BUILD_DIR, UE_POOL, Pgwu, PgwuConfig, SessionPlan, session_columns
from perfkit.pgwu_model import emit
from perfkit.profiles import S5_VLAN, TrafficProfile
from perfkit.trial import DATAPLANES, DIRECTIONS, FCS_LEN, LINE_RATES, L1_OVERHEAD

#: Per-packet time budget of one core at 10GbE line rate with 64-byte frames [ns].
BUDGET_64B_10GBE_NS = 1e9 / (LINE_RATES["10GbE"] / ((64 + L1_OVERHEAD) * 8))


@dataclass
class ProgBenchResult:
    """Cost of one dataplane program per packet, kernel-timed. Times are medians over rounds [ns]."""

    dataplane: str
    direction: str
    frame_size: int
    wire_frame_size: int
    sessions: int
    udp_csum: bool
    vlan: bool
    ns_per_packet: float
    """Harness + program under test."""
    baseline_ns_per_packet: float
    """Harness + XDP_DROP program, measured the same way in the same run."""
    net_ns_per_packet: float
    """Median of the per-round differences: the program's own cost."""
    ratio: float
    """ns_per_packet / baseline_ns_per_packet."""
    net_min_ns: float
    net_max_ns: float
    budget_ns: float
    """Per-packet budget of one core at 10GbE line rate for the offered frame size."""
    rounds: int
    repeat: int
    measured_runs: int
    path_counter: str
    path_packets: int
    """How much ``path_counter`` rose during the measured runs (must equal measured_runs)."""
    other_counters: dict[str, int] = field(default_factory=dict)
    """Counters that rose besides the path counter (must be empty)."""
    cpu: int = -1

    @property
    def path_verified(self) -> bool:
        return self.path_packets == self.measured_runs and not self.other_counters

    def to_dict(self) -> dict:
        return asdict(self) | {"path_verified": self.path_verified,
                               "budget_64b_10gbe_ns": BUDGET_64B_10GBE_NS}


def _offsets(profile: TrafficProfile) -> tuple[int, int, int]:
    """(teid_off, ue_off, vlan_off) of the fields the harness varies in ``profile.packet(0)``; 0 = not varied."""
    off = profile.offsets()
    if profile.direction == "ul":
        return off["gtp"] + 4, off["inner_ip"] + 12, 0  # GTP TEID, inner IPv4 source
    return 0, off["inner_ip"] + 16, 14 if profile.vlan else 0  # IPv4 destination, tenant VLAN TCI


def _keys(plan: SessionPlan, seed: int) -> np.ndarray:
    """Every session once, in random order, as bench_key records."""
    cols = session_columns(plan)
    order = np.random.default_rng(seed).permutation(plan.count) if plan.count > 1 else np.arange(1)
    keys = np.zeros(plan.count, dtype=np.dtype(bench_key))
    keys["teid"] = cols["ul_teid"][order].astype(">u4").view("<u4")
    keys["ue_addr"] = cols["ue_addr"][order].astype(">u4").view("<u4")
    keys["vlan"] = cols["tenant_vlan"][order].astype(">u2").view("<u2")
    return keys


def prog_bench(dataplane: str = "pgwu", direction: str = "ul", frame_size: int = 64, sessions: int = 1,
               udp_csum: bool = False, vlan: bool | None = None, rounds: int = 21, repeat: int = 200_000,
               cpu: int | None = None, pgwu: Pgwu | None = None, seed: int = 1) -> ProgBenchResult:
    """Measure one configuration. ``pgwu``: reuse an object that already holds the sessions."""
    if dataplane not in DATAPLANES:
        raise ConfigError("dataplane", dataplane, DATAPLANES)
    if direction not in DIRECTIONS:
        raise ConfigError("direction", direction, DIRECTIONS)
    if rounds < 3:
        raise ConfigError("rounds", rounds, "an integer >= 3")
    if repeat < 1000:
        raise ConfigError("repeat", repeat, "an integer >= 1000")
    vlan = sessions > UE_POOL if vlan is None else vlan
    plan = SessionPlan(count=sessions, tagged=vlan)
    config = PgwuConfig(s5_ifindex=1, sgi_ifindex=1, udp_csum=udp_csum, s5_vlan=S5_VLAN if vlan else 0)
    profile = TrafficProfile(direction=direction, frame_size=frame_size, flows=1, plan=plan, config=config,
                             vlan=vlan)
    frame = profile.packet(0)
    cpu = cpu if cpu is not None else max(os.sched_getaffinity(0))
    own = pgwu is None
    pg = pgwu or Pgwu.load(max_sessions=max(sessions, 1024))
    old_affinity = os.sched_getaffinity(0)
    try:
        if own:
            pg.add_sessions(plan)
        pg.configure(config)
        with BpfObject(BUILD_DIR / "bench.o", max_entries={"bench_keys": max(sessions, 1)}) as harness, \
                BpfObject(BUILD_DIR / "drop.o") as drop:
            cfg = _setup_harness(harness, frame, profile, seed)
            os.sched_setaffinity(0, {cpu})
            return _measure(pg, harness, drop, frame, profile, cfg, rounds, repeat, cpu)
    finally:
        os.sched_setaffinity(0, old_affinity)
        if own:
            pg.close()


def _setup_harness(harness: BpfObject, frame: bytes, profile: TrafficProfile, seed: int) -> bench_config:
    """Load template and keys; returns the config to install once the path is verified."""
    teid_off, ue_off, vlan_off = _offsets(profile)
    plan = profile.plan
    keys = _keys(plan, seed)
    restore = min(BENCH_RESTORE_MAX, len(frame) // 8 * 8)
    cfg = bench_config(frame_len=len(frame), restore_len=restore, nkeys=0,
                       teid_off=teid_off, ue_off=ue_off, vlan_off=vlan_off)
    zero = struct.pack("=I", 0)
    harness.map("bench_config").update(zero, cfg)  # no keys yet: the template frame as it is
    tmpl = bench_template()
    tmpl.bytes[:restore] = list(frame[:restore])
    harness.map("bench_template").update(zero, tmpl)
    m = harness.map("bench_keys")
    for lo in range(0, len(keys), 65536):
        chunk = keys[lo:lo + 65536]
        idx = np.arange(lo, lo + len(chunk), dtype="<u4")
        m.update_batch(idx.tobytes(), chunk.tobytes(), len(chunk))
    cfg.nkeys = len(keys) if plan.count > 1 else 0
    return cfg


def _measure(pg: Pgwu, harness: BpfObject, drop: BpfObject, frame: bytes, profile: TrafficProfile,
             cfg: bench_config, rounds: int, repeat: int, cpu: int) -> ProgBenchResult:
    target = harness.map("bench_target")
    bench = harness.program("xdp_bench")
    zero = struct.pack("=I", 0)
    fds = {"dut": pg.program.fd, "base": drop.program("xdp_drop").fd}
    path = "ul_fwd" if profile.direction == "ul" else "dl_fwd"

    # one plain run first: the intended path, byte for byte what the reference model says
    target.update(zero, struct.pack("=I", fds["dut"]))
    first = bench.test_run(frame)
    want = emit(frame, pg.config, profile.plan)
    if first.verdict != want.verdict or first.data_out != want.out:
        raise PerfkitError(f"prog-bench: the program did not take the {path} path "
                           f"({first.verdict}, model: {want.verdict}/{want.stat})")
    harness.map("bench_config").update(zero, cfg)  # now vary the sessions
    times: dict[str, list[int]] = {"dut": [], "base": []}
    warm = pg.stats()
    for r in range(rounds + 1):  # round 0 warms caches and is not counted
        for name in (("dut", "base") if r % 2 else ("base", "dut")):
            target.update(zero, struct.pack("=I", fds[name]))
            res = bench.test_run(frame, repeat=repeat)
            expect = "XDP_DROP" if name == "base" else want.verdict
            if res.verdict != expect:
                raise PerfkitError(f"prog-bench: {name} run returned {res.verdict}, expected {expect}")
            if r:
                times[name].append(res.duration_ns)
        if r == 0:
            warm = pg.stats()
    after = pg.stats()
    rose = {k: after[k].packets - warm[k].packets for k in after if after[k].packets != warm[k].packets}
    path_packets = rose.pop(path, 0)
    net = [d - b for d, b in zip(times["dut"], times["base"])]
    dut, base = statistics.median(times["dut"]), statistics.median(times["base"])
    wire = len(frame) + FCS_LEN
    return ProgBenchResult(
        dataplane="pgwu", direction=profile.direction, frame_size=profile.frame_size, wire_frame_size=wire,
        sessions=profile.plan.count, udp_csum=pg.config.udp_csum, vlan=profile.vlan,
        ns_per_packet=dut, baseline_ns_per_packet=base, net_ns_per_packet=float(statistics.median(net)),
        ratio=dut / base if base else float("inf"), net_min_ns=min(net), net_max_ns=max(net),
        budget_ns=1e9 / (LINE_RATES["10GbE"] / ((wire + L1_OVERHEAD) * 8)),
        rounds=rounds, repeat=repeat, measured_runs=rounds * repeat, path_counter=path,
        path_packets=path_packets, other_counters=rose, cpu=cpu)
