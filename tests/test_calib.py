"""The calibrated DUT (bpf/calib.bpf.c) in the real kernel: the program against its reference model
(BPF_PROG_TEST_RUN, a fuzz sample), the Dataplane glue, the calibration (prog-bench at several
amounts of work N: the cost per packet is a straight line in N) and trials through the testbed
(frames forwarded and as the model says; the live cost per packet rises with N by the calibrated
slope, within 15 %: issue 10, "a calibrated DUT for the test suite"; and the DUT load model of
``perfkit.analysis.cost`` finds that slope in the live trials' load at several N and rates).

The machine is shared and noisy: costs are medians of several measurements, taken in alternating
order where they are compared, and the checks compare slopes, never absolute times.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import threading

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from perfkit import analysis, dataplanes
from perfkit.dataplanes.calib import (DATAPLANE as DP, FWD, Calib, CalibConfig, CalibTraffic, Calibration, bench_work,
                                      calibrate, fit_line)
from perfkit.dataplanes.calib.layouts import CALIB_MAX_WORK
from perfkit.dataplanes.calib.model import DROP_EVERY, emit
from perfkit.dataplanes.calib.traffic import L4_OFF, SIG_OFF, SPORT_BASE
from perfkit.errors import ConfigError
from perfkit.fuzz import fuzz
from perfkit.generators import create
from perfkit.paths import shown
from perfkit.progbench import prog_bench
from perfkit.scenario import Scenario
from perfkit.host.stallprobe import TRIAL_PERIOD_US, TRIAL_REPORT_US, StallProbe
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.testbed.bpfbuild import object_path
from perfkit.store import RunStore
from perfkit.testbed.topology import PORT_MACS
from perfkit.trial import TrialResult
from tests.conftest import ROOT
from tests.dataplane_checks import kernel_does_as_the_model_says

#: The amounts of work the calibration measures, and those of the live trials (the slopes compare
#: the first and the last; the DUT load model's second stage needs three).
WORKS = (0, 100, 200, 400)
LIVE_WORKS = (0, 200, 400)
#: Offered rate of the live trials: the DUT sustains it at N = 400 (~4.5 us of program per packet).
LIVE_RATE = 100_000
#: How far a live slope may be from the calibrated one (issue 10).
TOLERANCE = 0.15


# -- parameters, keys, the registry ------------------------------------------------------------------
def test_the_registry_has_the_calibrated_dut():
    assert "calib" in dataplanes.names() and dataplanes.get("calib") is DP
    assert DP.validate({}) == {"work_iterations": 0, "drop_every": 0}
    assert DP.forward_counters == {FWD} == {"calib_fwd"}
    assert DP.variant == "work_iterations" and DP.variant_label(100) == "N = 100 work iterations"


@pytest.mark.parametrize("params,flows,cores,key", [
    ({"work_iterations": 100}, 1, 1, "calib-64B-1flow-1core-w100"),
    ({}, 16, 2, "calib-64B-16flow-2core-w0"),
])
def test_scenario_keys(params, flows, cores, key):
    sc = Scenario("calib", frame_size=64, flows=flows, dut_cores=cores, params=params)
    assert sc.key == key and sc.variant == str(params.get("work_iterations", 0))
    r = TrialResult.for_scenario(sc, wire_frame_size=64, generator="sim", duration=1.0, intended_pps=1.0,
                                 intended_packets=1, tx_packets=1, rx_packets=1)
    assert r.scenario_key == key and TrialResult.from_record(r.to_record()).params == dict(sc.params)


@pytest.mark.parametrize("value", [-1, CALIB_MAX_WORK + 1, 1.5, "lots", True])
def test_bad_work_names_the_field(value):
    with pytest.raises(ConfigError, match="^work_iterations: "):
        Scenario("calib", params={"work_iterations": value})


def test_bad_traffic_names_the_field():
    with pytest.raises(ConfigError, match="^flows: "):
        CalibTraffic(flows=65537)
    with pytest.raises(ConfigError, match="^frame_size: "):
        CalibTraffic(frame_size=63)


def test_the_work_limit_is_the_headers():
    header = (ROOT / "bpf" / "include" / "calib_kern_user.h").read_text()
    assert re.search(r"#define CALIB_MAX_WORK \(1U << (\d+)\)", header).group(1) == str(CALIB_MAX_WORK.bit_length() - 1)


# -- the program against the model (BPF_PROG_TEST_RUN) -----------------------------------------------
def _frames(traffic: CalibTraffic) -> list[bytes]:
    """Every flow's frame, and frames that are not forwarded or are odd."""
    ip = IP(src="198.18.0.9", dst="198.19.0.9") / UDP(sport=1, dport=2) / Raw(b"x" * 30)
    eth = Ether(src=PORT_MACS["p0"], dst=PORT_MACS["a"])
    frames = [traffic.packet(i, seq=i, stream=i % 4, ts=i * 1000) for i in range(traffic.flows)]
    return frames + [
        bytes(eth / ARP()),  # not IPv4: the host's
        bytes(eth / Dot1Q(vlan=5) / ip),  # tagged: not IPv4 at this DUT
        bytes(eth / ip)[:33],  # IPv4 header cut short
        bytes(eth / ip)[:34],  # just the header: forwarded (nothing else is checked)
        bytes(eth / ip) + b"\xaa" * 17,  # Ethernet padding leaves with the frame
    ]


@pytest.mark.parametrize("work", [0, 7, 1000])
def test_emit_agrees_with_the_kernel(work):
    """The DutProgram set up for a scenario: verdict, output bytes and the counter that rose are the
    model's; each forwarded packet did exactly N work iterations."""
    traffic = DP.traffic(128, 8, DP.validate({"work_iterations": work}))
    dut = DP.load(traffic, 1, 2)
    try:
        assert dut.config.egress_ifindex == 2 and dut.config.work == work
        seen = set()
        for frame in _frames(traffic):
            seen.add(kernel_does_as_the_model_says(DP, traffic, dut, frame, of_the_traffic=False).stat)
        assert seen == {FWD, "pass", "drop_truncated"}
        stats = dut.control.stats()
        assert stats[FWD].packets == traffic.flows + 2 and stats[FWD].iterations == work * stats[FWD].packets
        for i in range(traffic.flows):
            out = dut.program.test_run(traffic.packet(i)).data_out
            assert out == traffic.expected_output(i) and DP.check_output(traffic, out) is None
            assert out[12:] == traffic.packet(i)[12:] and Ether(out).dst == PORT_MACS["p1"]
            assert Ether(out).src == PORT_MACS["b"]
    finally:
        dut.close()


def test_without_an_egress_port_frames_are_dropped_and_counted():
    with Calib.load() as c:
        c.configure(CalibConfig(work=5))
        frame = CalibTraffic().packet(0)
        assert emit(frame, c.config).stat == "drop_no_egress"
        assert c.program.test_run(frame).verdict == "XDP_DROP"
        assert c.stats()["drop_no_egress"].packets == 1 and c.stats()[FWD].iterations == 0


def test_fuzzed_frames_agree_with_the_model():
    res = fuzz("calib", 3000, seed=11)
    assert res.ok, "\n".join(map(str, res.examples)) or str(res.failures)
    assert res.verdicts.get("XDP_ABORTED", 0) == 0
    assert res.verdicts.get("XDP_DROP", 0) and res.verdicts.get("XDP_REDIRECT", 0) and res.verdicts.get("XDP_PASS", 0)


def test_check_output_names_the_first_difference():
    t = DP.traffic(64, 4, DP.validate({}))
    out = t.expected_output(3, seq=7, stream=3, ts=99)
    assert DP.check_output(t, out) is None
    assert "eth.dst" in DP.check_output(t, t.packet(3))
    b = bytearray(out)
    b[L4_OFF:L4_OFF + 2] = struct.pack("!H", SPORT_BASE + 4)
    assert "no flow" in DP.check_output(t, bytes(b))
    b = bytearray(out)
    b[SIG_OFF] ^= 0xFF
    assert "no signature" in DP.check_output(t, bytes(b))
    b = bytearray(out)
    b[22] = 3  # the TTL
    assert "ipv4 header" in DP.check_output(t, bytes(b))
    assert "byte 59" in DP.check_output(t, out[:-1] + b"\x01")
    assert "bytes, expected" in DP.check_output(t, out + b"\0")


# -- the traffic profile ------------------------------------------------------------------------------
def _apply_engine(frame: bytes, engine, flow: int) -> bytes:
    """What the generator writes (var + add, big-endian, truncated to the field)."""
    b = bytearray(frame)
    for w in engine.writes:
        v = (flow + w.add) & ((1 << (8 * w.size)) - 1)
        b[w.offset:w.offset + w.size] = v.to_bytes(w.size, "big")
    return bytes(b)


@pytest.mark.parametrize("flows,size", [(1, 64), (1000, 64), (65536, 1518)])
def test_traffic_profile(flows, size):
    t = CalibTraffic(frame_size=size, flows=flows)
    assert t.wire_frame_size == t.output_frame_size == size
    eng = t.field_engine()
    assert len(eng.writes) == (flows > 1) and eng.sig_offset == SIG_OFF
    assert SIGNATURE.unpack_from(t.packet(3, seq=9, stream=2, ts=5), eng.sig_offset)[1:] == (2, 9, 5)
    for i in sorted({0, 1, flows - 1, flows // 2}):
        frame = t.packet(i)
        pkt = Ether(frame)
        rebuilt = pkt.copy()
        del rebuilt[IP].chksum
        assert bytes(rebuilt) == frame, "the IPv4 checksum is valid"
        assert pkt[IP].src == "198.18.0.1" and pkt[IP].dst == "198.19.0.1" and pkt[UDP].chksum == 0
        assert pkt[UDP].sport == (SPORT_BASE + i % flows) & 0xFFFF
        assert _apply_engine(t.packet(0), eng, i) == frame, "the field engine makes flow i's frame"


@pytest.mark.parametrize("ingress", ["a", "b"])
@pytest.mark.parametrize("size", [64, 65, 1518, 3000])
def test_a_packet_is_the_frame_scapy_builds_with_its_signature(size, ingress):
    """``packet`` fills the signature into a frame built once per flow: byte for byte the frame scapy
    builds with that signature (UDP carries no checksum; IPv4's covers its header)."""
    t = CalibTraffic(frame_size=size, flows=4464, ingress=ingress)
    src, dst = t.macs.into(ingress)
    for flow, seq, stream, ts in [(0, 0, 0, 0), (5, 1, 2, 3), (4463, 2**32 - 1, 2**16 - 1, 2**32 - 1), (70000, 7, 0, 9)]:
        hdr = (Ether(src=src, dst=dst) / IP(src="198.18.0.1", dst="198.19.0.1", id=0, flags="DF", ttl=64) /
               UDP(sport=(SPORT_BASE + flow % t.flows) & 0xFFFF, dport=5001, chksum=0))
        sig = SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts)
        want = bytes(hdr / Raw(sig + bytes(size - 4 - len(hdr) - SIGNATURE.size)))
        assert t.packet(flow, seq, stream, ts) == want
        assert SIGNATURE.unpack_from(want, SIG_OFF)[1:] == (stream, seq, ts)


# -- prog-bench and the calibration ---------------------------------------------------------------------
def test_prog_bench_runs_the_calibrated_dut():
    res = prog_bench("calib", frame_size=64, params={"work_iterations": 10}, rounds=3, repeat=2000)
    assert res.path_verified and res.path_packets == 3 * 2000 and res.other_counters == {}
    assert res.keys == 0 and res.params["work_iterations"] == 10


def test_fit_line():
    line = fit_line([0, 1, 2, 4], [1.0, 3.0, 5.0, 9.0])
    assert line.slope == pytest.approx(2.0) and line.intercept == pytest.approx(1.0) and line.r2 == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        fit_line([1, 1], [2.0, 3.0])


def test_the_cost_per_packet_is_linear_in_the_work():
    """The calibration: ns per packet rises linearly with N; the slope is the cost of one iteration
    (prog-bench at each N of ``WORKS``, twice in alternating order, medians)."""
    c = calibrate(WORKS)
    print(f"calibration: {c.ns_per_iteration:.2f} ns per iteration, intercept {c.intercept_ns:.1f} ns, "
          f"R² {c.r2:.4f}; net ns at N = {dict(zip(c.works, c.net_ns))}")
    assert c.works == WORKS and c.passes == 2
    assert c.r2 > 0.95 and c.ns_per_iteration > 0
    assert all(a < b for a, b in zip(c.net_ns, c.net_ns[1:])), "more work costs more"
    assert c.predict(400) == pytest.approx(c.intercept_ns + 400 * c.ns_per_iteration)


# -- trials through the testbed: XDP generator -> calibrated DUT -> sink ---------------------------------
@pytest.mark.parametrize("size,flows,cores", [(64, 1, 1), (128, 16, 2)], ids=["1flow-1core", "16flow-2core"])
def test_trial_forwards_and_matches_the_model(size, flows, cores):
    work = 100
    with create("xdp", Scenario("calib", frame_size=size, flows=flows, dut_cores=cores,
                                params={"work_iterations": work})) as g:
        r = g.measure(50_000, 1.0)
        stats = g.dut.nf.control.stats()
        streams = g.sink.read().streams
    assert r.tx_packets > 0 and r.mismatched_packets == 0, r.notes
    # every packet offered came back, or its loss is explained: counted where it was dropped (a
    # receive ring that overflowed while the host held a packet thread off its core)
    assert r.tx_packets - r.rx_packets == sum(r.dut_drops.values()) + sum(r.tester_drops.values()), r.notes
    assert set(r.dut_drops) <= {"rx_ring_full"}, "the program itself dropped nothing"
    assert r.rx_bytes == r.rx_packets * size and r.params == {"work_iterations": work, "drop_every": 0}
    assert r.scenario_key == f"calib-{size}B-{flows}flow-{cores}core-w{work}"
    assert stats[FWD].packets == r.tx_packets - r.dut_drops.get("rx_ring_full", 0)
    assert stats[FWD].iterations == work * stats[FWD].packets, "every packet did its N iterations"
    assert len(streams) == min(flows, 64) and r.bpf_ns_per_packet and r.bpf_ns_per_packet > 0
    # the trial names the objects its DUT loaded, each with the sha256 of the file as it was loaded
    loaded = ["calib", "steer"] if cores > 1 else ["calib"]
    assert r.objects == {shown(object_path(n)): hashlib.sha256(object_path(n).read_bytes()).hexdigest() for n in loaded}


@dataclasses.dataclass
class Live:
    trials: dict[tuple[str, int], list[TrialResult]]
    """Trials by (load, N): load ``partial`` at ``LIVE_RATE``, ``full`` as fast as the generator goes,
    ``10k``, ``30k`` and ``60k`` at those rates (for the DUT load model: rates where its threads sleep
    between packets)."""
    calibration: Calibration
    """prog-bench over the same stretch of time, its passes between the trials."""


#: The loads of the live trials: offered rate (None: as fast as possible), trial duration [s] and
#: trials per round.
LOADS = {"partial": (LIVE_RATE, 1.0, 2), "full": (None, 1.0, 2), "10k": (10_000, 0.5, 1), "30k": (30_000, 0.5, 1),
         "60k": (60_000, 0.5, 1)}


@pytest.fixture(scope="module")
def live() -> Live:
    """Trials at each N of ``LIVE_WORKS`` and each load, and the calibration taken in between.

    This machine's speed drifts by some 10 % over seconds (the host's other work), so what is
    compared is measured over the same time, in alternating order: three times, per N of
    ``LIVE_WORKS`` a testbed (a warm-up, then the trials of ``LOADS``), then one prog-bench pass over
    ``WORKS`` (some 90 s in all: each testbed's trials take 8 s and a pass follows each, so that the
    calibration spans the trials' time). Per-packet costs hold whether or not a trial lost packets,
    so every trial counts.

    prog-bench runs on the DUT core with the testbed's stall probe armed there as in trials: its
    ticks take some 20 µs each from whatever runs on the core (``bench/probe_cost.py``), so the live
    costs include them (with the 200 µs probe of before, a calibration without it read 8-15 % below
    the live slopes, and the DUT cost slope left the 15 % band in CI)."""
    trials: dict[tuple[str, int], list[TrialResult]] = {(load, w): [] for load in LOADS for w in LIVE_WORKS}
    points: dict[int, list[float]] = {w: [] for w in WORKS}
    passes = 0
    for rep in range(3):
        for w in (LIVE_WORKS if rep % 2 == 0 else LIVE_WORKS[::-1]):
            with create("xdp", Scenario("calib", frame_size=64, params={"work_iterations": w})) as g:
                g.measure(LIVE_RATE, 0.2)  # warm-up: caches, page pools, NAPI threads
                for load, (rate, seconds, count) in LOADS.items():
                    trials[(load, w)] += [g.measure(rate, seconds) for _ in range(count)]
                dut_core = g.dut_cores[0]
            with StallProbe([dut_core], TRIAL_PERIOD_US, TRIAL_REPORT_US):
                for n in (WORKS if passes % 2 == 0 else WORKS[::-1]):
                    points[n].append(bench_work(n, cpu=dut_core))
            passes += 1
    return Live(trials, Calibration.fit(points))


def _live_slope(live: Live, load: str, metric: str) -> tuple[float, dict[int, float]]:
    """The slope of ``metric`` between the two amounts of work at ``load`` (each N the median of its trials)."""
    med = {w: statistics.median(getattr(r, metric) for r in live.trials[(load, w)]) for w in LIVE_WORKS}
    lo, hi = LIVE_WORKS[0], LIVE_WORKS[-1]
    return (med[hi] - med[lo]) / (hi - lo), med


def _check_slope(live: Live, load: str, metric: str) -> None:
    assert live.calibration.r2 > 0.95 and live.calibration.passes == 3 * len(LIVE_WORKS)
    slope, med = _live_slope(live, load, metric)
    cal = live.calibration
    print(f"\nlive {metric} at {load} load: {med} -> {slope:.2f} ns per iteration; calibrated "
          f"{cal.ns_per_iteration:.2f} (prog-bench net ns {dict(zip(cal.works, cal.net_ns))})")
    assert slope == pytest.approx(cal.ns_per_iteration, rel=TOLERANCE)


@pytest.mark.slow  # the ``live`` fixture: some 100 s of trials and prog-bench passes
@pytest.mark.parametrize("load", ["partial", "full"])
def test_live_bpf_cost_rises_with_the_calibrated_slope(live, load):
    """The BPF statistics of live trials (the DUT program's run time per packet) rise with N by the
    slope prog-bench calibrated, within 15 %: at 100 kpps (the DUT sustains it at both N) and as fast
    as the generator goes."""
    _check_slope(live, load, "bpf_ns_per_packet")


@pytest.mark.slow
def test_live_dut_cost_rises_with_the_calibrated_slope(live):
    """The CPU time of the DUT's packet threads per packet rises with N by the calibrated slope,
    within 15 %, with the DUT saturated: the DUT cost perfkit reports sees the program's work. (At a
    partial load the cost per packet includes wake-ups a saturated DUT does not pay, and those
    depend on N too: 3-8 ns per iteration was measured there against ~10.5 calibrated.)"""
    _check_slope(live, "full", "dut_ns_per_packet")



# -- a DUT that drops 1 frame in N by its program (issue 22, part 3) ---------------------------------
def test_drop_every_is_a_parameter_with_its_own_key():
    sc = Scenario("calib", frame_size=64, flows=1, params={"work_iterations": 10, "drop_every": 1000})
    assert sc.key == "calib-64B-1flow-1core-w10-d1000"
    assert DP.traffic(64, 1, sc.params).config.drop_every == 1000
    with pytest.raises(ConfigError, match="^drop_every: "):
        Scenario("calib", params={"drop_every": -1})


def test_drop_every_drops_the_nth_packet_of_a_cpu_after_its_work():
    """In the kernel, from one CPU: packets 3, 6 and 9 of 9 are dropped and counted as drop_every,
    as the model says for each packet's number; the others are forwarded; all nine did the work."""
    traffic = DP.traffic(64, 1, DP.validate({"work_iterations": 7, "drop_every": 3}))
    dut = DP.load(traffic, 1, 2)
    seen: list[tuple[int, str]] = []

    def run() -> None:  # the counter is per CPU: stay on one
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        for seq in range(1, 10):
            before = dut.counters()
            verdict = dut.program.test_run(traffic.packet(0)).verdict
            after = dut.counters()
            (stat,) = [k for k in after if after[k] != before[k]]
            want = emit(traffic.packet(0), dut.config, seq)
            assert (verdict, stat) == (want.verdict, want.stat), seq
            seen.append((seq, stat))

    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
        stats = dut.control.stats()
    finally:
        dut.close()
    assert [seq for seq, stat in seen if stat == DROP_EVERY] == [3, 6, 9]
    assert stats[DROP_EVERY].packets == 3 and stats[FWD].packets == 6
    assert stats[FWD].iterations == 6 * 7  # the work of forwarded packets (dropped ones did it too)


@pytest.mark.slow
def test_live_load_model_bounds_the_calibrated_marginal_cost_from_below(live, tmp_path):
    """The DUT load model (``perfkit.analysis.cost``) over the live trials at each N and rate (10 k
    to as fast as the generator goes): per N, the packet threads' load against the processed rate
    (inputs only, costs >= 0); across N, the marginal cost per packet against N. Its slope is the
    cost of one work iteration: positive, and a lower bound of the calibrated one, at least half of
    it. The threads' wake-ups (9-19 µs each here) fall as the rate rises, which a line in the rate
    reads as a lower marginal cost: 7.95 ns per iteration against 11.40 calibrated (2026-12-01, the
    2-vCPU VM shared with five other test runs; 9.2 against 9.1 when the wake-ups were a regressor,
    7.0 without). They are an outcome of the load, not an input; what the lines leave, they
    explain (r = 0.75 and 0.39 on two days: printed, not asserted)."""
    store = RunStore.create("live", tmp_path)
    for rs in live.trials.values():
        for r in rs:
            store.append(r)
    model = analysis.fit_load(analysis.load_frame(analysis.load_run("live", tmp_path)))
    assert model is not None and model.marginal is not None
    assert list(model.scenarios["work_iterations"]) == list(LIVE_WORKS)
    scen = model.scenarios
    assert (scen["marginal_ns"] >= 0).all() and (scen["fixed_cores"] >= 0).all()
    slope = model.marginal.coef_["work_iterations"]
    cal = live.calibration
    print(f"\nDUT load model: marginal ns per packet at N = {dict(zip(LIVE_WORKS, scen['marginal_ns'].round(0)))} "
          f"(± {dict(zip(LIVE_WORKS, scen['marginal_se'].round(0)))}), fixed {model.fixed_per_core_:.3f} cores, "
          f"residuals vs wake-ups r = {model.wakeup_r_:.2f}; {model.r2_words()} -> {slope:.2f} ns per iteration; "
          f"calibrated {cal.ns_per_iteration:.2f}")
    assert LOAD_MODEL_LOWEST * cal.ns_per_iteration <= slope <= (1 + TOLERANCE) * cal.ns_per_iteration


#: The load model's cost of a work iteration, at least, as a share of the calibrated one: the
#: wake-ups' CPU, which falls with the rate, takes part of it away (23-30 % measured, see above).
LOAD_MODEL_LOWEST = 0.5


# -- searches on DUTs whose truth is known (issue 22, part 3) ----------------------------------------
#: The calibrated DUT's work in the search tests: ~0.13-0.17 Mpps on one core of the 2-vCPU VM,
#: where the generator offers 0.5-1.5 Mpps on a core of its own.
SEARCH_WORK = 600
#: How far above the DUT's measured capacity a figure may be: the VM's speed moves by ~8 % between
#: 1 s trials (perfkit.generators.sim, speed_per_second), and the capacity is the better of two
#: max-rate trials, one before and one after the search.
CAPACITY_TOLERANCE = 0.10
#: What a known DUT's figure may never say: its own loss, passed off as the testbed's or the host's.
NOT_THE_DUTS = ("testbed", "host stalls")


def _perfkit_json(*args: str) -> dict:
    """``perfkit search ... --json`` on the calibrated DUT, behind a NIC-sized queue (4096 frames: a
    search on a VM), one flow. The caller holds the testbed lock."""
    cmd = [sys.executable, "-m", "perfkit", "search", *args, "--dataplane", "calib", "--work-iterations",
           str(SEARCH_WORK), "--flows", "1", "--rx-queue", "4096", "--no-progress", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 2), out.stderr[-2000:]  # 2: no lower bound (the DUT that drops)
    return json.loads(out.stdout)


def _capacity(cores: int) -> dict:
    """A max-rate trial at 1 Mpps: what the DUT forwards when offered far more than it can."""
    return _perfkit_json("maxrate", "--dut-cores", str(cores), "--rate", "1Mpps", "--duration", "1")


def _cost_capacity(*results: dict) -> float:
    """The DUT's capacity by its own cost at full load [pps]: 1e9 / its CPU time per packet in the
    max-rate trials (one flow: one core carries every packet). A host stall in a max-rate trial
    lowers what it forwards, not the DUT's cost per packet."""
    return max([0.0] + [1e9 / t["dut_ns_per_packet"] for r in results for t in r["trials"] if t.get("dut_ns_per_packet")])


def _ndrpdr(cores: int, *extra: str) -> dict:
    """NDR and PDR0.5% in seconds-long trials, 5 % wide (the VM moves more than that anyway)."""
    return _perfkit_json("ndrpdr", "--dut-cores", str(cores), "--goals", "0,0.005", "--relative-width", "0.05",
                         "--initial-duration", "0.5", "--duration", "1", "--rate", "1Mpps", "--min-rate", "10kpps",
                         *extra)


def _report(what: str, res: dict, capacity: float | None = None) -> None:
    goals = "; ".join(f"{g['name']} {g['lower_bound'] or 0:.0f} pps ({g['limited_by']}: {g['reason']})"
                      for g in res["goals"])
    cap = f"; capacity {capacity:.0f} pps" if capacity else ""
    print(f"\n{what}: {goals}{cap}; {res['trial_count']} trials, {res['stalled_trials']} stalled")


# make test-slow (22 s and more): make test keeps the rules it rests on, on recorded trials
# (test_search: ring overflows with time to spare, the core whose ring overflowed, loss no counter explains)
@pytest.mark.slow
@pytest.mark.parametrize("cores", [1, 2])
def test_a_dut_that_drops_1_frame_in_n_has_no_ndr_and_it_is_the_duts(cores):
    """The calibrated DUT dropping every 1000th packet by its program: there is no NDR, and what
    limits it is the DUT, by its program's drop counter -- with one DUT core and with two (on two
    vCPUs the tester shares one). Its PDR0.5% is the DUT's capacity, at most what it forwards at
    full load."""
    res = _ndrpdr(cores, "--drop-every", "1000")
    cap = _capacity(cores)
    _report(f"calib w{SEARCH_WORK} drop_every 1000, {cores} DUT core(s)", res, cap["lower_bound"])
    ndr, pdr = res["goals"]
    assert ndr["lower_bound"] is None and ndr["upper_bound"] is not None
    assert ndr["limited_by"] == res["limited_by"] == "dut"
    assert "drop_every" in ndr["reason"], ndr["reason"]
    assert not {g["limited_by"] for g in res["goals"]} & set(NOT_THE_DUTS), res["goals"]
    assert all(t["dut_drops"].get("drop_every", 0) > 0 for t in res["trials"] if t["tx_packets"] >= 1000)
    # the capacity trial forwarded 132 kpps once where the PDR was 154 kpps (a stalled trial): the
    # DUT's cost per packet in it bounds the capacity too
    assert pdr["lower_bound"] <= max(cap["lower_bound"], _cost_capacity(cap)) * (1 + CAPACITY_TOLERANCE), cap["trials"]


@pytest.mark.slow  # three searches and max-rate trials; make test keeps the DUT that drops 1 in N
@pytest.mark.parametrize("cores", [1, 2])
def test_a_dut_of_known_capacity_is_the_limit_and_its_figures_are_at_most_that(cores):
    """The calibrated DUT at N = 600 saturates far below the generator (a core of its own: 0.5-1.5
    Mpps): its NDR and PDR0.5% are the DUT's, at most its measured capacity (the better of a max-rate
    trial before and after the search) + 10 %. With two DUT cores one flow loads one of them (the
    mean busy share is under 0.5): judged on that core, the figures are still the DUT's, never the
    testbed's; where that core is the one the tester shares, the generator gets what the DUT's
    real-time threads leave it, and the figure is the shared set-up's capacity (``dut``, noted)."""
    before = _capacity(cores)
    res = _ndrpdr(cores)
    after = _capacity(cores)
    # or the DUT core's own capacity, 1e9 / its cost per packet at full load (one flow: one core
    # carries every packet): with two DUT cores a max-rate trial at 1 Mpps starves the generator on
    # the core it shares with the loaded DUT core, and a search's slower trials leave it more (NDR
    # 155 kpps over 135 forwarded at max rate, once); with one, a host stall in a max-rate trial
    # lowers what it forwards (CI: 138.7 kpps against an NDR of 160.6), not what a packet costs
    capacity = max(before["lower_bound"], after["lower_bound"], _cost_capacity(before, after))
    _report(f"calib w{SEARCH_WORK}, {cores} DUT core(s)", res, capacity)
    assert before["limited_by"] == after["limited_by"] == "dut", (before["reason"], after["reason"])
    for g in res["goals"]:
        assert g["limited_by"] == "dut", (g["name"], g["limited_by"], g["reason"])
        assert g["lower_bound"] <= capacity * (1 + CAPACITY_TOLERANCE), (g["name"], g["lower_bound"], capacity)
    if cores == 2:
        judged = [t for t in res["trials"] if t["dut_busy_per_core"]]
        assert max(max(t["dut_busy_per_core"].values()) for t in judged) >= 0.7  # one core carried it all
        assert min(t["dut_busy"] for t in judged) < 0.5                          # the mean says otherwise
