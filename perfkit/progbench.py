"""``prog-bench``: the kernel's own cost of a dataplane program per packet (BPF_PROG_TEST_RUN repeat).

How it measures (so that every run takes the intended path):

1. ``bpf/bench.bpf.c`` wraps the program: before each run it moves the head back, restores the
   frame's first bytes from a template and writes the next flow's key fields (the dataplane's
   ``BenchSpec``: a tunnel id, a client address or port), then tail-calls the target. Without this, repeat runs would process their own output.
2. The baseline is the same harness tail-calling ``bpf/drop.bpf.c`` (returns XDP_DROP), measured
   in the same run, alternating round by round; net cost = the median of paired differences.
3. The path is proven: the target's forwarding counter must rise by exactly the number of measured
   runs and no other counter may move; the first output must be the reference model's (a
   dataplane without one, a description without ``model``: its verdict).
"""
from __future__ import annotations

import os
import statistics
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from perfkit import dataplanes
from perfkit.dataplane import BenchSpec, DutProgram, NotProvided
from perfkit.errors import ConfigError, PerfkitError
from perfkit.layouts import BENCH_KEY_MAX, BENCH_MAX_FIELDS, BENCH_RESTORE_MAX, bench_config, bench_template
from perfkit.libbpf import XDP_PACKET_HEADROOM, BpfObject
from perfkit.scenario import Scenario
from perfkit.testbed.bpfbuild import object_path
from perfkit.units import FCS_LEN, L1_OVERHEAD, LINE_RATES

#: The longest frame (without FCS) BPF_PROG_TEST_RUN puts in one buffer: a page less the XDP
#: headroom and skb_shared_info.
TEST_RUN_MAX = os.sysconf("SC_PAGESIZE") - XDP_PACKET_HEADROOM - 320
#: Per-packet time budget of one core at 10GbE line rate with 64-byte frames [ns].
BUDGET_64B_10GBE_NS = 1e9 / (LINE_RATES["10GbE"] / ((64 + L1_OVERHEAD) * 8))


@dataclass
class ProgBenchResult:
    """Cost of one dataplane program per packet, kernel-timed. Times are medians over rounds [ns]."""

    dataplane: str
    frame_size: int
    wire_frame_size: int
    params: dict[str, Any]
    """The dataplane's scenario parameters, as measured (PGW-U: direction, sessions ...)."""
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
    keys: int = 0
    """Distinct keys (flows, sessions) the runs cycled through; 0: one frame as it is."""
    cpu: int = -1

    @property
    def path_verified(self) -> bool:
        return self.path_packets == self.measured_runs and not self.other_counters

    def to_dict(self) -> dict:
        return asdict(self) | {"path_verified": self.path_verified,
                               "budget_64b_10gbe_ns": BUDGET_64B_10GBE_NS}


def prog_bench(dataplane: str = dataplanes.DEFAULT, frame_size: int = 64, params: Mapping[str, Any] | None = None,
               rounds: int = 21, repeat: int = 200_000, cpu: int | None = None, seed: int = 1,
               inspect: Callable[[DutProgram], None] | None = None) -> ProgBenchResult:
    """Measure one configuration of ``dataplane`` (``params``: its scenario parameters).

    ``inspect`` is called with the loaded program after the measurement, before it is unloaded
    (tests read its tables)."""
    if rounds < 3:
        raise ConfigError("rounds", rounds, "an integer >= 3")
    if repeat < 1000:
        raise ConfigError("repeat", repeat, "an integer >= 1000")
    allowed = sorted(os.sched_getaffinity(0))
    if cpu is not None and cpu not in allowed:
        raise ConfigError("cpu", cpu, f"one of the CPUs this process may use: {allowed}")
    scenario = Scenario(dataplane, frame_size=frame_size, params=dict(params or {}))
    if scenario.mix:
        raise ConfigError("frame_size", frame_size, "a size in bytes: prog-bench runs the program on one frame")
    if not scenario.dp.has_bench:  # before its traffic is built; its own refusal says what it lacks
        scenario.dp.bench_spec(frame_size, scenario.params, seed)
        raise NotProvided("no prog-bench support (bench_spec)", scenario.dp.name)
    over = scenario.wire_frame_size - FCS_LEN - TEST_RUN_MAX
    if over > 0:  # a longer frame is split over pages (multi-buffer): the program sees only the first
        raise ConfigError("frame_size", frame_size, f"<= {frame_size - over} bytes for this {scenario.dp.title} traffic "
                          f"(BPF_PROG_TEST_RUN gives a program at most {TEST_RUN_MAX} bytes in one buffer)")
    spec, dut = scenario.dp.bench_spec(frame_size, scenario.params, seed)
    cpu = cpu if cpu is not None else allowed[-1]
    old_affinity = os.sched_getaffinity(0)
    try:
        with BpfObject(object_path("bench"), max_entries={"bench_keys": max(len(spec.keys), 1)}) as harness, \
                BpfObject(object_path("drop")) as drop:
            cfg = _setup_harness(harness, spec)
            os.sched_setaffinity(0, {cpu})
            res = _measure(dut, harness, drop, spec, cfg, rounds, repeat, cpu)
        if inspect:
            inspect(dut)
    finally:
        os.sched_setaffinity(0, old_affinity)
        dut.close()
    res.dataplane, res.frame_size, res.params = dataplane, frame_size, {**scenario.params, **spec.description}
    return res


def _setup_harness(harness: BpfObject, spec: BenchSpec) -> bench_config:
    """Load template and keys; returns the config to install once the path is verified."""
    frame = spec.frame
    if len(spec.fields) > BENCH_MAX_FIELDS or (len(spec.keys) and spec.keys.shape[1] > BENCH_KEY_MAX):
        raise ConfigError("bench fields", len(spec.fields), f"<= {BENCH_MAX_FIELDS} fields of a {BENCH_KEY_MAX}-byte key")
    restore = min(BENCH_RESTORE_MAX, len(frame) // 8 * 8)
    cfg = bench_config(frame_len=len(frame), restore_len=restore, nkeys=0, nfields=len(spec.fields))
    for i, (offset, size, key_off) in enumerate(spec.fields):
        if size not in (2, 4) or key_off % size or offset + size > restore:
            raise ConfigError("bench field", (offset, size, key_off), "2 or 4 aligned key bytes inside the restored bytes")
        cfg.fields[i].offset, cfg.fields[i].size, cfg.fields[i].key_off = offset, size, key_off
    zero = struct.pack("=I", 0)
    harness.map("bench_config").update(zero, cfg)  # no keys yet: the template frame as it is
    tmpl = bench_template()
    tmpl.bytes[:restore] = list(frame[:restore])
    harness.map("bench_template").update(zero, tmpl)
    keys = np.zeros((len(spec.keys), BENCH_KEY_MAX), dtype=np.uint8)
    if len(keys):
        keys[:, :spec.keys.shape[1]] = spec.keys
    m = harness.map("bench_keys")
    for lo in range(0, len(keys), 65536):
        chunk = keys[lo:lo + 65536]
        idx = np.arange(lo, lo + len(chunk), dtype="<u4")
        m.update_batch(idx.tobytes(), chunk.tobytes(), len(chunk))
    cfg.nkeys = len(keys)
    return cfg


def _measure(dut: DutProgram, harness: BpfObject, drop: BpfObject, spec: BenchSpec, cfg: bench_config,
             rounds: int, repeat: int, cpu: int) -> ProgBenchResult:
    target = harness.map("bench_target")
    bench = harness.program("xdp_bench")
    zero = struct.pack("=I", 0)
    fds = {"dut": dut.program.fd, "base": drop.program("xdp_drop").fd}
    frame, want, path = spec.frame, spec.expected, spec.path_counter

    # one plain run first: the intended path, byte for byte what the reference model says (without
    # a model, ``want.out`` is None: the verdict only)
    target.update(zero, struct.pack("=I", fds["dut"]))
    first = bench.test_run(frame)
    if first.verdict != want.verdict or (want.out is not None and first.data_out != want.out):
        raise PerfkitError(f"prog-bench: the program did not take the {path} path "
                           f"({first.verdict}, model: {want.verdict}/{want.stat})")
    harness.map("bench_config").update(zero, cfg)  # now vary the keys
    times: dict[str, list[int]] = {"dut": [], "base": []}
    warm = dut.counters()
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
            warm = dut.counters()
    after = dut.counters()
    rose = {k: after[k] - warm.get(k, 0) for k in after if after[k] != warm.get(k, 0)}
    path_packets = rose.pop(path, 0)
    net = [d - b for d, b in zip(times["dut"], times["base"])]
    med_dut, base = statistics.median(times["dut"]), statistics.median(times["base"])
    wire = len(frame) + FCS_LEN
    return ProgBenchResult(
        dataplane="", frame_size=0, wire_frame_size=wire, params={},
        ns_per_packet=med_dut, baseline_ns_per_packet=base, net_ns_per_packet=float(statistics.median(net)),
        ratio=med_dut / base if base else float("inf"), net_min_ns=min(net), net_max_ns=max(net),
        budget_ns=1e9 / (LINE_RATES["10GbE"] / ((wire + L1_OVERHEAD) * 8)),
        rounds=rounds, repeat=repeat, measured_runs=rounds * repeat, path_counter=path,
        path_packets=path_packets, other_counters=rose, keys=len(spec.keys), cpu=cpu)
