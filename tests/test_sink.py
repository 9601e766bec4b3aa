"""The sink program (bpf/sink.bpf.c) in the real kernel, fed crafted signed packets through
BPF_PROG_TEST_RUN: sequence bookkeeping, latency, IPDV, capture; and the histogram arithmetic."""
from __future__ import annotations

import functools
import random
import subprocess
import time

import numpy as np
import pytest
from scapy.layers.l2 import ARP, Ether

from perfkit.dataplanes.pgwu.control import SessionPlan
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.testbed.sink import Sink, bucket_bounds, bucket_of, percentiles
from tests.conftest import ROOT

UL = PgwuTraffic(direction="ul", frame_size=128)
DL_TCP = PgwuTraffic(direction="dl", frame_size=128, inner_l4="tcp", plan=SessionPlan(1))


def now32() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) & 0xFFFFFFFF


@functools.lru_cache(maxsize=None)
def output_and_offset(profile: PgwuTraffic) -> tuple[bytes, int]:
    frame = profile.expected_output(0)
    return frame, len(frame) - profile.inner_len + (profile.offsets()["signature"] - profile.offsets()["inner_ip"])


def signed(profile: PgwuTraffic, stream: int, seq: int, age_ns: int = 5000) -> bytes:
    """A frame as the DUT would emit it, whose signature says it left ``age_ns`` ago."""
    frame, off = output_and_offset(profile)
    sig = SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq & 0xFFFFFFFF, (now32() - age_ns) & 0xFFFFFFFF)
    return frame[:off] + sig + frame[off + SIGNATURE.size:]


@pytest.fixture(scope="module")
def sink():
    s = Sink(capture_max=0)
    yield s
    s.close()


def feed(sink: Sink, seqs, stream: int = 0, profile: PgwuTraffic = UL, age_ns: int = 5000) -> None:
    for q in seqs:
        assert sink.program.test_run(signed(profile, stream, q, age_ns)).verdict == "XDP_DROP"


def feed_timed(sink: Sink, seqs, age_ns: int) -> list[int]:
    """``feed``, one frame at a time; returns per frame how long it took from signing to the end of its
    run [ns]: the sink saw it that much after its stamp at most (a bound measured here, not assumed)."""
    took = []
    for q in seqs:
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        assert sink.program.test_run(signed(UL, 0, q, age_ns)).verdict == "XDP_DROP"
        took.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC) - t0)
    return took


def bucket_width(ns: float) -> int:
    low, high = bucket_bounds(bucket_of(int(ns)))
    return high - low


def one_stream(sink: Sink, stream: int = 0):
    return next(s for s in sink.read().streams if s.stream == stream)


@pytest.mark.parametrize("seqs,reordered,duplicates,late", [
    (range(10), 0, 0, 0),
    ([0, 1, 3, 2, 4], 1, 0, 0),
    ([0, 1, 1, 2, 2, 2], 0, 3, 0),
    ([0, 2000, 5], 0, 0, 1),                      # 5 is older than the 1024-packet window
    ([0, 5000, 4999, 4999], 1, 1, 0),             # a jump far ahead, then late arrivals
    ([0, 63, 64, 65, 1100, 77], 0, 0, 1),         # 16 words back: its slot belongs to 1100 now
    ([0, 63, 64, 65, 1100, 128, 128], 1, 1, 0),   # 15 words back: still tracked
    ([0xFFFFFFFE, 0xFFFFFFFF, 0, 1], 0, 0, 0),    # sequence numbers wrap
    ([5, 4, 3, 2, 1, 0], 5, 0, 0),
])
def test_sequence_bookkeeping(sink, seqs, reordered, duplicates, late):
    sink.reset(0)
    feed(sink, seqs)
    s = one_stream(sink)
    assert (s.reordered, s.duplicates, s.late) == (reordered, duplicates, late)
    assert s.packets == len(list(seqs))


def test_sequence_bookkeeping_matches_a_python_model_on_random_orders(sink):
    rng = random.Random(7)
    for _ in range(20):
        seqs = list(range(300))
        for _ in range(rng.randint(0, 30)):  # local swaps and repeats, within the window
            i = rng.randrange(299)
            seqs[i], seqs[i + 1] = seqs[i + 1], seqs[i]
        seqs += rng.sample(seqs, rng.randint(0, 10))
        sink.reset(0)
        feed(sink, seqs)
        s = one_stream(sink)
        seen, top, reord, dup = set(), -1, 0, 0
        for q in seqs:
            if q in seen:
                dup += 1
            elif q < top:
                reord += 1
            seen.add(q)
            top = max(top, q)
        assert (s.reordered, s.duplicates) == (reord, dup)
        assert s.packets - s.duplicates == len(set(seqs))


def test_streams_are_independent(sink):
    sink.reset(0)
    feed(sink, [0, 1, 2], stream=3)
    feed(sink, [0, 2, 1], stream=9)
    rep = sink.read()
    by = {s.stream: s for s in rep.streams}
    assert set(by) == {3, 9}
    assert (by[3].reordered, by[9].reordered) == (0, 1)
    assert rep.packets == 6


def test_latency_from_the_signature(sink):
    sink.reset(0)
    took = feed_timed(sink, range(200), age_ns=20_000)
    lat = sink.read().latency_ns()
    assert 20_000 <= lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    # each frame's latency is its age plus at most the time from signing it to the end of its run
    # (so the median too), give or take the histogram bucket the median falls in
    bound = 20_000 + sorted(took)[len(took) // 2]
    assert lat["p50"] <= bound + bucket_width(bound)
    assert lat["max"] <= 20_000 + max(took)


def test_ipdv_between_consecutive_packets(sink):
    sink.reset(0)
    took = []
    for i, age in enumerate([10_000, 10_010_000, 10_000, 10_010_000]):
        took += feed_timed(sink, [i], age_ns=age)
    rep = sink.read()
    assert int(rep.ipdv_hist.sum()) == 3  # pairs (0,1), (1,2), (2,3)
    # |10 ms| each, give or take how late the sink saw either frame of a pair after signing it (measured
    # around each frame: a vCPU stall here can take milliseconds) and the histogram bucket
    slack = max(took) + bucket_width(10_000_000)
    assert abs(rep.ipdv_ns()["p50"] - 10_000_000) <= slack


def test_tcp_inside_gtp_is_found_too(sink):
    sink.reset(0)
    feed(sink, [0, 1], profile=DL_TCP)
    assert sink.read().packets == 2


def test_unsigned_frames_are_counted_apart(sink):
    sink.reset(0)
    sink.program.test_run(bytes(Ether() / ARP()))
    sink.program.test_run(bytes(UL.expected_output(0)))  # signature magic zeroed below
    frame = bytearray(signed(UL, 0, 0))
    frame[-UL.inner_len + 28:-UL.inner_len + 30] = b"\0\0"
    sink.program.test_run(bytes(frame))
    rep = sink.read()
    assert (rep.frames, rep.unsigned) == (3, 2)


def test_capture_keeps_the_first_frames_whole(sink):
    sink.reset(capture_max=3)
    frames = [signed(UL, 0, q) for q in range(5)]
    for f in frames:
        sink.program.test_run(f)
    caps = sink.captures()
    assert [c.data for c in caps] == frames[:3]
    assert all(c.length == len(frames[0]) for c in caps)


def test_histogram_buckets_match_the_c_code(tmp_path):
    values = sorted({0, 1, 63, 64, 65, 127, 128, 1000, 4095, 4096, 123_456, 2**31 - 1, 2**32 - 1}
                    | {random.Random(1).randrange(2**32) for _ in range(300)})
    src = tmp_path / "h.c"
    src.write_text('#include <stdio.h>\n#include "hist.h"\nint main(void){unsigned v;'
                   'while(scanf("%u",&v)==1) printf("%u\\n", hist_bucket(v)); return 0;}\n')
    subprocess.run(["cc", "-I", str(ROOT / "bpf" / "include"), str(src), "-o", str(tmp_path / "h")], check=True)
    out = subprocess.run([str(tmp_path / "h")], input="\n".join(map(str, values)), capture_output=True,
                         text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [bucket_of(v) for v in values]
    for v in values:
        lo, hi = bucket_bounds(bucket_of(v))
        assert lo <= v < hi or bucket_of(v) == 1023
        assert hi - lo <= max(1, lo / 32)  # ~3% resolution


def test_percentiles_from_a_histogram():
    hist = np.zeros(1024, dtype=np.int64)
    for v, n in ((10, 50), (1000, 40), (100_000, 10)):
        hist[bucket_of(v)] += n
    p = percentiles(hist, lo=10, hi=100_000)
    assert p["p50"] == 10 and 960 <= p["p90"] <= 1040 and 96_000 <= p["p99"] <= 104_000
    assert p["min"] == 10 and p["max"] == 100_000
    assert percentiles(np.zeros(1024, dtype=np.int64)) == {}
