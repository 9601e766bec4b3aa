"""The DUT's cost per packet (seed 003: CPU time per packet), a model of it, and the capacity it
implies (seed 001's question: how many cores for X Gbit/s of Y-byte frames).

Only trials where the DUT set the pace enter: a DUT that idles between packets pays wake-ups per
packet that a busy one does not (``TrialResult.dut_capacity_pps``), and a figure the generator
capped says nothing about the DUT.

``cost_frame(run)`` -- one row per trial whose DUT packet threads were busy at least ``BUSY_MIN``
of the DUT cores' time, that shared no core with the tester and lost nothing to host stalls:
    trial_id, scenario columns (``SCENARIO_COLUMNS``), the dataplane's parameters, offered_mpps,
    dut_busy [0..1], dut_ns_per_packet, bpf_ns_per_packet, kernel_ns_per_packet [ns], and the
    model's features: frame_size [B], dut_cores, log_flows (log10 flows), one ``log_<param>``
    (log10(1 + value)) per integer parameter, one 0/1 column per boolean parameter, one 0/1
    ``variant_<value>`` column per variant but the first, and ``per_core_inv_mpps`` (DUT cores /
    offered Mpps [1/Mpps]).

Why the rate is a feature: the DUT's packet threads cost a share per second that does not depend on
the packets (NAPI wake-ups and polls, the kthreads' scheduling), and per packet that share is
spread thinner the faster packets come: ``dut_ns_per_packet = per-packet cost + fixed ns per second
/ packets per second per core``. Without it, a DUT measured at 0.7 and at 1.1 Mpps looked like two
DUTs (1302 and 899 ns per packet, the same scenario), and the model explained half the variance.

``fit_cost(frame)`` -- ``LinearFit`` (``perfkit.analysis.models``) of ``dut_ns_per_packet`` on the
features that vary, with R² and residuals.

``drop_generator_limited(frame, run)`` -- a per-trial frame without the trials the generator
capped (for the CPU-share models of ``perfkit.analysis.models``).

``cost_capacity(fit, frame, gbps, frame_sizes)`` -- per variant and frame size, the DUT cores
needed: the smallest c with ``rate x cost(c) <= c x utilization`` (rate in packets/s of
user-side frames, cost in s per packet), from the model evaluated at the table's other features
(their most common values in ``frame``; for the rate feature, a rate where the DUT was busy: the
fixed share per second is not extrapolated to rates and core counts never measured).
Columns: variant, frame_size, gbps, mpps, ns_per_packet, cores_needed, extrapolated.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from perfkit import dataplanes
from perfkit.analysis.models import LinearFit, fit_linear
from perfkit.analysis.run import SCENARIO_COLUMNS, RunData
from perfkit.search.common import OFFER_SHORTFALL, SPARE_BUSY
from perfkit.units import L1_OVERHEAD

#: A trial's DUT packet threads must have run at least this share of the DUT cores' time (below
#: it the DUT had time to spare, and pays wake-ups a busy one does not).
BUSY_MIN = SPARE_BUSY
TARGET = "dut_ns_per_packet"
#: The rate feature (see module doc): DUT cores / offered Mpps.
RATE_FEATURE = "per_core_inv_mpps"
COST_COLUMNS = ["dut_ns_per_packet", "bpf_ns_per_packet", "kernel_ns_per_packet"]


def _param_features(frame: pd.DataFrame) -> list[str]:
    """Add the dataplane parameters' feature columns to ``frame``; their names."""
    names: list[str] = []
    for dp_name in frame["dataplane"].unique():
        dp = dataplanes.get(str(dp_name))
        for p in dp.params:
            if p.name not in frame or p.name == dp.variant:
                continue
            if p.kind is bool:
                col = p.name
                frame[col] = frame[p.name].fillna(False).astype(bool).astype(float)
            elif p.kind is int:
                col = f"log_{p.name}"
                frame[col] = np.log10(1.0 + pd.to_numeric(frame[p.name], errors="coerce").fillna(0.0))
            else:
                continue
            names.append(col)
    variants = sorted(frame["variant"].astype(str).unique())
    for v in variants[1:]:
        frame[f"variant_{v}"] = (frame["variant"].astype(str) == v).astype(float)
        names.append(f"variant_{v}")
    return list(dict.fromkeys(names))


def cost_frame(run: RunData) -> pd.DataFrame:
    """The trials the DUT's cost can be read from (see module doc)."""
    t = run.trials
    if t.empty or TARGET not in t:
        return pd.DataFrame(columns=["trial_id", *SCENARIO_COLUMNS, "offered_mpps", "dut_busy", *COST_COLUMNS])
    busy = pd.to_numeric(t["dut_busy"], errors="coerce")
    seconds = t["elapsed"].where(t["elapsed"] > 0, t["duration"])
    capped = t["tx_packets"] / seconds < t["intended_pps"] * (1 - OFFER_SHORTFALL)
    keep = (busy >= BUSY_MIN) & t[TARGET].notna() & ~t["shared_cores"].astype(bool) & ~t["disturbed"]
    keep &= ~(capped & (t["tx_packets"] <= t["rx_packets"]))  # the generator, not the DUT, set the pace
    d = t[keep].copy()
    d["log_flows"] = np.log10(d["flows"].astype(float))
    d[RATE_FEATURE] = d["dut_cores"].astype(float) / d["offered_mpps"]
    d.attrs["features"] = ["frame_size", "dut_cores", "log_flows", *_param_features(d), RATE_FEATURE]
    cols = ["trial_id", *SCENARIO_COLUMNS, "offered_mpps", "dut_busy", *COST_COLUMNS]
    params = sorted({p.name for name in d["dataplane"].unique() for p in dataplanes.get(str(name)).params} & set(d))
    out = d[list(dict.fromkeys(cols + params + d.attrs["features"]))].reset_index(drop=True)
    out.attrs["features"] = d.attrs["features"]
    return out


def fit_cost(frame: pd.DataFrame) -> LinearFit | None:
    """The per-packet DUT cost model (see module doc); None with too few trials."""
    if frame.empty:
        return None
    return fit_linear(frame, frame.attrs.get("features", ["frame_size", "dut_cores"]), TARGET, "DUT cost per packet",
                      {"dataplane": ", ".join(sorted(frame["dataplane"].astype(str).unique()))})


def cost_capacity(fit: LinearFit, frame: pd.DataFrame, gbps_targets: Sequence[float], frame_sizes: Sequence[int],
                  utilization: float = 80.0, max_cores: int = 64) -> pd.DataFrame:
    """DUT cores needed per variant, frame size and Gbit/s target (see module doc)."""
    cols = ["variant", "frame_size", "gbps", "mpps", "ns_per_packet", "cores_needed", "extrapolated"]
    if fit is None or frame.empty:
        return pd.DataFrame(columns=cols)
    typical = {f: float(frame[f].mode().iloc[0]) for f in fit.features if f in frame}
    fs_lo, fs_hi = frame["frame_size"].min(), frame["frame_size"].max()
    cores = np.arange(1, max_cores + 1, dtype=float)
    rows = []
    variants = sorted(frame["variant"].astype(str).unique())
    for variant in variants:
        for fs in frame_sizes:
            X = pd.DataFrame({**typical, "frame_size": float(fs), "dut_cores": cores})
            for v in variants[1:]:
                X[f"variant_{v}"] = float(v == variant)
            ns = fit.predict(X)
            for gbps in gbps_targets:
                pps = gbps * 1e9 / ((fs + L1_OVERHEAD) * 8)
                ok = np.nonzero(pps * ns * 1e-9 <= cores * utilization / 100)[0]
                rows.append({"variant": variant, "frame_size": fs, "gbps": gbps, "mpps": pps / 1e6,
                             "ns_per_packet": float(ns[ok[0]] if len(ok) else ns[0]),
                             "cores_needed": int(cores[ok[0]]) if len(ok) else math.nan,
                             "extrapolated": bool(not fs_lo <= fs <= fs_hi
                                                  or (len(ok) and cores[ok[0]] > frame["dut_cores"].max()))})
    return pd.DataFrame(rows, columns=cols)


def cost_capacity_pivot(cap: pd.DataFrame) -> pd.DataFrame:
    """Cores needed, rows frame size, columns (variant, Gbit/s); ``*``: extrapolated; ``-``: more
    than the table's maximum."""
    if cap.empty:
        return pd.DataFrame()
    d = cap.copy()
    d["cores"] = [("-" if pd.isna(c) else f"{int(c)}") + ("*" if x else "") for c, x in zip(d["cores_needed"],
                                                                                          d["extrapolated"])]
    d["target"] = d["gbps"].map(lambda g: f"{g:g} Gbit/s")
    return d.pivot(index="frame_size", columns=["variant", "target"], values="cores")


def drop_generator_limited(frame: pd.DataFrame, run: RunData) -> pd.DataFrame:
    """``frame`` (one row per trial, with ``trial_id``) without the trials whose generator offered
    clearly less than asked: their figures are the generator's, not the DUT's, and enter no model."""
    t = run.trials
    if frame.empty or t.empty:
        return frame
    seconds = t["elapsed"].where(t["elapsed"] > 0, t["duration"])
    short = t["tx_packets"] / seconds < t["intended_pps"] * (1 - OFFER_SHORTFALL)
    return frame[~frame["trial_id"].isin(set(t.loc[short, "trial_id"]))].reset_index(drop=True)
