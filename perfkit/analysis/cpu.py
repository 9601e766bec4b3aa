"""The DUT's CPU per trial, from the best source the run has.

Sources, in order of preference: ``prometheus`` (node-exporter via Prometheus, saved by the campaign
into the run directory), ``proc_stat`` (the trial's own /proc/stat snapshots, ``RunStore.cpu_frame``),
``trial_busy`` (the busy fraction per DUT core the trial recorded, e.g. simulated DUTs). One frame
never mixes sources: the first that has every wanted trial is used (else the one covering most),
and ``CpuSource.label`` says which, for the plots. Trials that should have had Prometheus figures but
have none (node-exporter was down; the campaign lists them, ``RunStore.prometheus_cpu_missing``) are
named by ``CpuSource.missing_note``: the frame then takes every trial's CPU from /proc/stat.

``cpu_frame`` -- trial with a DUT CPU figure (see ``cpu_per_trial`` for the sources):
    the scenario columns, trial_id, unit, method_name, phase, dut_cores, frame_size,
    inv_frame_size [1/B], offered_mpps, rx_mpps, loss_ratio,
    cpu_pct          softirq + system per DUT core, mean over the DUT cores [%] (busy when only that
                     is known): the target of the per-core-count fits
    cpu_cores_pct    the same summed over the DUT cores: the DUT's CPU work [% of one core], the
                     target of the multivariate model (work, unlike load per core, does not fall as
                     cores are added, so it is linear in the offered rate)
    cpu_busy_pct, cpu_softirq_pct, cpu_system_pct   per DUT core, mean over the DUT cores [%]
    cpu_cores_seen   DUT cores the source had figures for

``cpu_modes_per_core`` -- scenario x DUT core x mode: the mean share of the core's time per CPU
mode (user, system, softirq, steal ...) [%], for the report's heatmap.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from perfkit.analysis.run import SCENARIO_COLUMNS, RunData


@dataclass(frozen=True)
class CpuSource:
    """Where the CPU figures of a frame come from."""

    name: str
    """``prometheus`` (node-exporter via Prometheus), ``proc_stat`` (the trial's own /proc/stat
    snapshots) or ``trial_busy`` (only the busy fraction the trial recorded per DUT core)."""
    covered: int
    """Trials that have figures from it."""
    total: int
    """Trials asked for."""
    missing: tuple[str, ...] = ()
    """Trials asked for that have no Prometheus CPU figures although they were long enough (the
    campaign found no node-exporter samples for them: it or Prometheus was down): their CPU comes
    from /proc/stat (``missing_note`` says so)."""

    @property
    def missing_note(self) -> str:
        """One line naming the trials without Prometheus CPU, or empty."""
        if not self.missing:
            return ""
        shown = ", ".join(self.missing[:5]) + (" ..." if len(self.missing) > 5 else "")
        return (f"no Prometheus CPU for {len(self.missing)} of {self.total} trials (node-exporter or Prometheus "
                f"was down then): {shown}; their DUT CPU is taken from /proc/stat")

    @property
    def label(self) -> str:
        what = {"prometheus": "Prometheus node-exporter, softirq + system",
                "proc_stat": "/proc/stat per trial, softirq + system",
                "trial_busy": "the trials' DUT busy fraction (all non-idle modes)"}.get(self.name, self.name)
        return f"CPU source: {what} ({self.covered}/{self.total} trials)"

def _per_trial_modes(frame: pd.DataFrame, dut_col: str) -> pd.DataFrame:
    """Mean over DUT cpus of busy, softirq, system fractions, per trial, from a tidy cpu x mode frame."""
    d = frame[frame[dut_col].astype(bool)]
    if d.empty:
        return pd.DataFrame(columns=["trial_id", "busy", "softirq", "system", "cores"])
    wide = d.pivot_table(index=["trial_id", "cpu"], columns="mode", values="fraction", aggfunc="sum", fill_value=0.0)
    idle = sum(wide[m] for m in ("idle", "iowait") if m in wide)
    total = wide.sum(axis=1)
    per_cpu = pd.DataFrame({"busy": 1 - idle / total.where(total > 0),
                            "softirq": wide["softirq"] if "softirq" in wide else 0.0,
                            "system": wide["system"] if "system" in wide else 0.0})
    out = per_cpu.groupby(level="trial_id").mean()
    out["cores"] = per_cpu.groupby(level="trial_id").size()
    return out.reset_index()

def cpu_per_trial(run: RunData, trial_ids: Iterable[str] | None = None,
                  prefer: Sequence[str] = ("prometheus", "proc_stat", "trial_busy")) -> tuple[pd.DataFrame, CpuSource]:
    """Per trial: cpu_busy_pct, cpu_softirq_pct, cpu_system_pct, cpu_pct (mean over DUT cores).

    The first source in ``prefer`` that has every wanted trial is used (no mixing of sources in
    one frame); if none has them all, the one covering most.
    """
    wanted = set(run.trials["trial_id"] if trial_ids is None else trial_ids)
    candidates: list[tuple[str, pd.DataFrame, int]] = []
    for name in prefer:
        frame = _cpu_source(run, name)
        frame = frame[frame["trial_id"].isin(wanted)]
        candidates.append((name, frame, frame["trial_id"].nunique()))
        if candidates[-1][2] >= len(wanted):
            break
    if not candidates:
        raise ValueError("prefer: no CPU source given; allowed: prometheus, proc_stat, trial_busy")
    full = candidates[-1][2] >= len(wanted)
    name, frame, _ = candidates[-1] if full else max(candidates, key=lambda c: c[2])
    out = pd.DataFrame({"trial_id": frame["trial_id"], "cpu_busy_pct": frame["busy"] * 100,
                        "cpu_softirq_pct": frame["softirq"] * 100, "cpu_system_pct": frame["system"] * 100,
                        "cpu_cores_seen": frame["cores"]})
    out["cpu_pct"] = (out["cpu_softirq_pct"] + out["cpu_system_pct"]).where(
        out["cpu_softirq_pct"].notna(), out["cpu_busy_pct"])
    out["cpu_cores_pct"] = out["cpu_pct"] * out["cpu_cores_seen"]
    no_prom = tuple(sorted(set(run.store.prometheus_cpu_missing()) & wanted)) if "prometheus" in prefer else ()
    return out.reset_index(drop=True), CpuSource(name, int(out["trial_id"].nunique()), len(wanted), no_prom)

def _cpu_source(run: RunData, name: str) -> pd.DataFrame:
    empty = pd.DataFrame(columns=["trial_id", "busy", "softirq", "system", "cores"])
    if name == "prometheus":
        prom = run.store.prometheus_cpu()
        if prom is None or prom.empty:
            return empty
        first = prom["instance"].iloc[0]
        return _per_trial_modes(prom[prom["instance"] == first], "dut")
    if name == "proc_stat":
        frame = run.store.cpu_frame()
        return empty if frame.empty else _per_trial_modes(frame, "dut_core")
    if name == "trial_busy":
        rows = []
        for tid, js in zip(run.trials["trial_id"], run.trials.get("dut_cpu", [])):
            busy = json.loads(js) if isinstance(js, str) and js else {}
            vals = [float(v) for v in busy.values() if v is not None and not math.isnan(float(v))]
            if vals:
                rows.append({"trial_id": tid, "busy": float(np.mean(vals)), "softirq": math.nan, "system": math.nan,
                             "cores": len(vals)})
        return pd.DataFrame(rows, columns=empty.columns) if rows else empty
    raise ValueError(f"cpu source {name!r}; allowed: prometheus, proc_stat, trial_busy")

def cpu_frame(run: RunData, methods: Sequence[str] | None = ("maxrate",), max_loss: float | None = None,
              prefer: Sequence[str] = ("prometheus", "proc_stat", "trial_busy")) -> tuple[pd.DataFrame, CpuSource]:
    """Trials (of ``methods``, with loss <= ``max_loss`` if given) joined with their DUT CPU."""
    t = run.trials
    if t.empty:
        return pd.DataFrame(), CpuSource("none", 0, 0)
    sel = t[t["in_result"]]
    if methods is not None:
        sel = sel[sel["method_name"].isin(list(methods))]
    if max_loss is not None:
        sel = sel[sel["loss_ratio"] <= max_loss]
    cpu, source = cpu_per_trial(run, sel["trial_id"], prefer)
    keep = [*SCENARIO_COLUMNS, "trial_id", "unit", "label", "method_name", "phase", "offered_mpps", "rx_mpps",
            "loss_ratio"]
    frame = sel[keep].merge(cpu, on="trial_id", how="inner")
    frame["inv_frame_size"] = 1.0 / frame["frame_size"]
    return frame.reset_index(drop=True), source


def cpu_modes_per_core(run: RunData, methods: Sequence[str] | None = ("maxrate",)) -> pd.DataFrame:
    """The DUT cores' time by CPU mode, per scenario (the trials' /proc/stat snapshots): one row per
    scenario x DUT core x mode, ``share_pct`` the mean share of the core's time [%] over the scenario's
    ``methods`` trials (all trials: None), with ``trials`` the number of them."""
    cols = ["scenario_key", "cpu", "mode", "share_pct", "trials"]
    frame = run.store.cpu_frame()
    if frame.empty:
        return pd.DataFrame(columns=cols)
    t = run.trials
    if methods is not None and "method_name" in t:
        t = t[t["method_name"].isin(methods)]
    d = frame[frame["dut_core"].astype(bool) & frame["trial_id"].isin(set(t["trial_id"]))]
    if d.empty:
        return pd.DataFrame(columns=cols)
    out = d.groupby(["scenario_key", "cpu", "mode"], sort=False).agg(
        share_pct=("fraction", "mean"), trials=("trial_id", "nunique")).reset_index()
    out["share_pct"] *= 100
    return out[cols]
