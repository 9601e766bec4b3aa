"""TRex's counters as a ``TrialResult``: ``get_stats()`` of the TX and RX ports, and the latency
stream's logarithmic histogram as perfkit's percentiles."""
from __future__ import annotations

import math
from typing import Any

from perfkit.scenario import Scenario
from perfkit.trial import TrialResult
from perfkit.units import FCS_LEN

PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p99.9": 0.999}
GLOBAL_COUNTERS_NOTE = ("TRex global port counters: ARP, LLDP and any other frame on the RX port count as "
                        "received (seed 000); 'received = not lost' is an approximation")


def histogram_quantile(histogram: dict[Any, int], q: float, lo: float, hi: float) -> float:
    """The q-quantile [usec] of TRex's logarithmic latency histogram: key k counts the packets from k
    to k + 10^floor(log10 k) usec (e.g. 100 -> 100..200); linear inside a bucket, clamped to [lo, hi]."""
    buckets = sorted((float(k), int(n)) for k, n in histogram.items() if int(n) > 0)
    target, seen = q * sum(n for _, n in buckets), 0
    for k, n in buckets:
        if seen + n >= target:
            return min(hi, max(lo, k + _bucket_width(k) * (target - seen) / n))
        seen += n
    return hi


def _bucket_width(k: float) -> float:
    return 10.0 ** math.floor(math.log10(k)) if k >= 1 else 10.0


def latency_ns(latency: dict[str, Any]) -> dict[str, float]:
    """TRex's per-pg_id ``latency`` dict (usec) as perfkit percentiles [ns]; empty without samples."""
    hist = latency.get("histogram") or {}
    if not any(int(n) for n in hist.values()):
        return {}
    lo, hi = float(latency["total_min"]), float(latency["total_max"])
    out = {"min": lo, **{name: histogram_quantile(hist, q, lo, hi) for name, q in PERCENTILES.items()}, "max": hi}
    mids = [(min(hi, max(lo, float(k) + _bucket_width(float(k)) / 2)), int(n)) for k, n in hist.items()]
    out["mean"] = sum(m * n for m, n in mids) / sum(n for _, n in mids)
    return {k: v * 1000.0 for k, v in out.items()}


def stats_to_result(stats: dict[Any, Any], scenario: Scenario, *, wire_frame_size: int, tx_port: int, rx_port: int,
                    rate_pps: float, duration: float, packets: int | None = None, latency_pg_id: int | None = None,
                    start_time: float = 0.0, end_time: float = 0.0) -> TrialResult:
    """TRex ``get_stats()`` output -> TrialResult. TRex counts bytes without FCS: 4 are added per frame."""
    tx, rx = stats[tx_port], stats[rx_port]
    sending = packets / rate_pps if packets else duration
    notes = [GLOBAL_COUNTERS_NOTE, "elapsed is the sending time asked of TRex (it reports no first/last packet time)"]
    lat: dict[str, float] = {}
    if latency_pg_id is not None:
        entry = stats.get("latency", {}).get(latency_pg_id) or stats.get("latency", {}).get(str(latency_pg_id), {})
        lat = latency_ns(entry.get("latency", {}))
        errs = {k: v for k, v in entry.get("err_cntrs", {}).items() if v}
        notes.append(f"latency of the latency stream (pg_id {latency_pg_id}) from TRex's logarithmic histogram: "
                     "percentiles interpolated inside buckets, mean from bucket midpoints" if lat
                     else f"no latency samples for pg_id {latency_pg_id}")
        if errs:
            notes.append(f"TRex latency stream errors: {errs}")
    for port, key in ((tx_port, "oerrors"), (rx_port, "ierrors")):
        if stats[port].get(key):
            notes.append(f"TRex port {port} {key}: {stats[port][key]}")
    if rx["ipackets"] > tx["opackets"]:
        notes.append(f"received {rx['ipackets'] - tx['opackets']} more frames than offered: foreign frames counted")
    return TrialResult.for_scenario(
        scenario, wire_frame_size=wire_frame_size, generator="trex",
        duration=sending, intended_pps=rate_pps,
        intended_packets=packets if packets is not None else max(1, round(rate_pps * duration)),
        tx_packets=tx["opackets"], rx_packets=rx["ipackets"], tx_bytes=tx["obytes"] + FCS_LEN * tx["opackets"],
        rx_bytes=rx["ibytes"] + FCS_LEN * rx["ipackets"], elapsed=sending, start_time=start_time, end_time=end_time,
        latency_ns=lat, notes=notes)
