"""The sink (``bpf/sink.bpf.c``) from userspace: attach, reset, read counters, latency and IPDV
percentiles, and the captured frames.

Latency is one-way: the generator writes ``bpf_ktime_get_ns()`` into the signature when it builds
the frame and the sink subtracts it on arrival (one clock, one machine). It therefore includes the
generator's batching (frames are flushed to the port every ``batch_size`` frames), the DUT and the
sink's own scheduling. Histogram buckets are exact below 64 ns and 1/32 of a power of two wide
above (~3 %); percentiles are bucket midpoints, min and max are exact.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfkit import dataplanes
from perfkit.encap import Encap, encap_struct
from perfkit.layouts import SINK_HIST_BUCKETS, sink_capture, sink_config, sink_stream, sink_totals
from perfkit.libbpf import BpfObject, RingBuffer, xdp_attach
from perfkit.testbed import netns
from perfkit.testbed.bpfbuild import object_path

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))
_CAPTURE_HDR = struct.Struct("=IIQ")  # struct sink_capture: len, caplen, ts_ns, then data
assert _CAPTURE_HDR.size == sink_capture.data.offset


def bucket_bounds(idx: int) -> tuple[int, int]:
    """[low, high) in ns of histogram bucket ``idx`` (the inverse of sink.bpf.c's hist_bucket)."""
    if idx < 64:
        return idx, idx + 1
    b, sub = (idx - 64) // 32 + 6, (idx - 64) % 32
    low = (32 + sub) << (b - 5)
    return low, low + (1 << (b - 5))


def bucket_of(value: int) -> int:
    """The bucket a value falls in (Python mirror of hist_bucket, for tests)."""
    if value < 64:
        return value
    b = value.bit_length() - 1
    return min(64 + (b - 6) * 32 + ((value >> (b - 5)) & 31), SINK_HIST_BUCKETS - 1)


def percentiles(hist: np.ndarray, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
    """p50/p90/p99/p99.9 and mean from bucket counts; ``lo``/``hi`` (exact min/max) are added."""
    total = int(hist.sum())
    if total == 0:
        return {}
    mids = np.array([sum(bucket_bounds(i)) / 2 for i in range(len(hist))])
    mids[:64] = np.arange(64)
    cum = np.cumsum(hist)
    out = {name: float(mids[int(np.searchsorted(cum, total * p / 100.0))]) for name, p in PERCENTILES}
    out["mean"] = float((hist * mids).sum() / total)
    if lo is not None:
        out["min"] = float(lo)
        out = {k: max(v, lo) for k, v in out.items()}
    if hi is not None:
        out["max"] = float(hi)
        out = {k: min(v, hi) for k, v in out.items()}
    return out


@dataclass
class StreamStats:
    """What the sink saw of one stream (one generator thread)."""

    stream: int
    packets: int
    bytes: int
    reordered: int
    duplicates: int
    late: int
    max_seq: int
    lat_min_ns: int
    lat_max_ns: int


@dataclass
class SinkReport:
    """Everything the sink counted since its last reset."""

    frames: int
    """Every frame that reached the sink port."""
    frame_bytes: int
    unsigned: int
    """Frames without a valid signature (not the generator's, or corrupted)."""
    streams: list[StreamStats]
    latency_hist: np.ndarray
    ipdv_hist: np.ndarray
    max_gap_ns: int = 0
    """Longest time between two arrivals on the sink CPU that received the most frames [ns]."""

    @property
    def packets(self) -> int:
        """Signed packets received, duplicates not counted twice."""
        return sum(s.packets - s.duplicates for s in self.streams)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.streams)

    @property
    def reordered(self) -> int:
        return sum(s.reordered + s.late for s in self.streams)

    @property
    def duplicates(self) -> int:
        return sum(s.duplicates for s in self.streams)

    def latency_ns(self) -> dict[str, float]:
        live = [s for s in self.streams if s.packets]
        if not live:
            return {}
        return percentiles(self.latency_hist, min(s.lat_min_ns for s in live), max(s.lat_max_ns for s in live))

    def ipdv_ns(self) -> dict[str, float]:
        return percentiles(self.ipdv_hist)


    @classmethod
    def counted(cls, packets: int, frame_bytes: int) -> SinkReport:
        """The report of a receiver that only counts (the DUT's kernel, its own counters): one stream,
        no latency, no captures."""
        empty = np.zeros(SINK_HIST_BUCKETS, dtype=np.int64)
        streams = [StreamStats(0, packets, frame_bytes, 0, 0, 0, 0, 0, 0)] if packets else []
        return cls(frames=packets, frame_bytes=frame_bytes, unsigned=0, streams=streams,
                   latency_hist=empty, ipdv_hist=empty.copy())


@dataclass
class Capture:
    """One captured frame."""

    ts_ns: int
    """bpf_ktime_get_ns() at arrival (CLOCK_MONOTONIC)."""
    length: int
    data: bytes = field(repr=False)


class Sink:
    """The sink program, attachable to several tester ports (each frame is counted where it lands).
    It finds the signature through the tunnels of ``encaps`` (default: every dataplane's)."""

    def __init__(self, capture_max: int = 64, encaps: tuple[Encap, ...] | None = None):
        tunnels = dataplanes.encapsulations() if encaps is None else tuple(encaps)
        self.obj = BpfObject(object_path("sink"), rodata=encap_struct(tunnels))
        self.program = self.obj.program("xdp_sink")
        self.ring = RingBuffer(self.obj.map("capture"))
        self.capture_max = capture_max

    def attach(self, ns: str, ifindex: int) -> None:
        with netns.inside(ns):
            xdp_attach(ifindex, self.program.fd)

    def reset(self, capture_max: int | None = None) -> None:
        """Zero every counter and histogram, forget captures; capture the next ``capture_max`` frames."""
        if capture_max is not None:
            self.capture_max = capture_max
        for name in ("sink_streams", "sink_totals", "latency_hist", "ipdv_hist"):
            self.obj.map(name).zero_all()
        self.ring.drain()
        self.obj.map("sink_config").update(struct.pack("=I", 0), sink_config(self.capture_max))

    def totals(self) -> tuple[int, int]:
        """(frames, bytes) seen so far, summed over CPUs (cheap: for drain polling)."""
        m = self.obj.map("sink_totals")
        recs = [sink_totals.from_bytes(v) for v in m.percpu_values(m.lookup(struct.pack("=I", 0)) or b"")]
        return sum(r.packets for r in recs), sum(r.bytes for r in recs)

    def read(self) -> SinkReport:
        m = self.obj.map("sink_totals")
        tot = [sink_totals.from_bytes(v) for v in m.percpu_values(m.lookup(struct.pack("=I", 0)) or b"")]
        streams = []
        for i, raw in enumerate(self.obj.map("sink_streams").array_values()):
            s = sink_stream.from_bytes(raw)
            if s.packets:
                streams.append(StreamStats(i, s.packets, s.bytes, s.reordered, s.duplicates, s.late, s.max_seq,
                                           s.lat_min, s.lat_max))
        return SinkReport(frames=sum(t.packets for t in tot), frame_bytes=sum(t.bytes for t in tot),
                          unsigned=sum(t.unsigned_packets for t in tot), streams=streams,
                          latency_hist=self._hist("latency_hist"), ipdv_hist=self._hist("ipdv_hist"),
                          max_gap_ns=max(tot, key=lambda t: t.packets).max_gap_ns if tot else 0)

    def _hist(self, name: str) -> np.ndarray:
        m = self.obj.map(name)
        return np.array([sum(struct.unpack(f"={len(raw) // 8}Q", raw)) for raw in m.array_values()],
                        dtype=np.int64)

    def captures(self) -> list[Capture]:
        out = []
        for rec in self.ring.drain():
            length, caplen, ts = _CAPTURE_HDR.unpack_from(rec)
            out.append(Capture(ts, length, rec[_CAPTURE_HDR.size:_CAPTURE_HDR.size + caplen]))
        return out

    def close(self) -> None:
        self.ring.close()
        self.obj.close()


def write_pcap(path: str | Path, captures: list[Capture]) -> None:
    """Save captures as a pcap file (timestamps: the monotonic clock, as wall time)."""
    # scapy takes a second to import: only when frames are written, never to read the sink
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    with PcapWriter(str(path), linktype=1, sync=True) as w:
        for c in captures:
            pkt = Ether(c.data)
            pkt.time = c.ts_ns / 1e9
            w.write(pkt)

