"""A run, loaded for analysis (``RunData``, ``load_run``), its trial frame, and facts about it.

``trial_frame`` -- trial: the store's columns (``trial.RECORD_COLUMNS``, plus ``unit``/``attempt``
from campaigns) and
    method_name  str    what ran it: maxrate, ndrpdr, ndr, sweep, latency ... (before the first '/')
    phase        str    the search phase (max, short, confirm, linear, binary, 10% ...)
    flow_mode    str    ``single`` (1 flow) or ``multi``
    scenario_key str    ``Scenario.key``, e.g. ``<dataplane>-<variant>-64B-1flow-1core`` (filled in for old records)
    variant      str    the dataplane's main categorical parameter (PGW-U: direction; L4 LB: protocol)
    params       str    JSON {name: value} of the dataplane's scenario parameters, one column each too
    unit, label  str    the campaign unit and its method label (``<scenario>__<method>`` outside campaigns)
    repeat       int    the unit's repeat (1 outside campaigns)
    offered_pps  float  the rate the trial is judged at (``trial.judged_pps``, as the searches judge it):
                        intended, or offered if the generator fell short; at the reference CPU speed
                        for speed-normalized trials (``speed_reference_ns`` set)
    offered_mpps, tx_mpps, rx_mpps  float  [Mpps];  tx_gbps, rx_gbps  float  L1 [Gbit/s]
    in_result    bool   the trial is part of its unit's final search (False: a superseded trial)
    disturbed    bool   host stalls explained its loss (``perfkit.host.disturbance``); False for old records
    retried      bool   a stalled trial the search ran again (its figure does not count)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from perfkit import dataplanes, framemix
from perfkit.errors import ConfigError
from perfkit.store import DEFAULT_ROOT, RunStore
from perfkit.trial import TrialResult, judged_pps, speed_factor

#: The columns that say which scenario a row belongs to, in every frame of this package.
SCENARIO_COLUMNS = ["scenario_key", "dataplane", "variant", "frame_size", "frame_mix", "flows", "flow_mode", "dut_cores"]


@dataclass
class RunData:
    """One run, loaded: what every notebook starts from."""

    run_id: str
    store: RunStore
    metadata: dict[str, Any]
    trials: pd.DataFrame
    """``trial_frame`` (see module doc)."""
    searches: list[dict[str, Any]]
    """The search summaries (``searches/*.json``), one per campaign unit."""

    @property
    def title(self) -> str:
        camp = self.metadata.get("campaign", {}).get("name", "")
        return f"run {self.run_id}" + (f" (campaign {camp})" if camp else "")

def load_run(run_id: str, data_root: str | Path = DEFAULT_ROOT) -> RunData:
    store = RunStore.open(run_id, data_root)
    searches = store.searches()
    return RunData(run_id, store, store.metadata(), trial_frame(store.trials(), searches), searches)

def variant_label(dataplane: str, variant: str) -> str:
    """How plots and tables name a variant (``UL (decap)``); the dataplane's title if it has none;
    of a dataplane no longer installed (a stored run's), the variant or the name as stored."""
    try:
        dp = dataplanes.get(dataplane)
    except ConfigError:
        return variant or dataplane
    return dp.variant_label(variant) if dp.variant else dp.title


def _scenario_fields(df: pd.DataFrame) -> pd.DataFrame:
    """``scenario_key``, ``variant``, ``params`` and the parameter columns of records written before
    trials stored them, derived by ``TrialResult`` (their one definition)."""
    derived = ["scenario_key", "variant", "params"]
    stale = df.index[df[derived].isna().any(axis=1)] if set(derived) <= set(df) else df.index
    for i in stale:
        rec = TrialResult.from_record(df.loc[i].dropna().to_dict()).to_record()
        for col in (*derived, *json.loads(rec["params"])):
            if col not in df:
                df[col] = pd.Series(None, index=df.index, dtype=object)
            df.at[i, col] = rec[col]
    return df


def trial_frame(trials: pd.DataFrame, searches: Sequence[dict[str, Any]] = ()) -> pd.DataFrame:
    """The store's trials with the derived columns of the module doc."""
    if trials.empty:
        return trials
    df = _scenario_fields(trials.copy())
    mixes = df["frame_mix"] if "frame_mix" in df else pd.Series("", index=df.index)
    df["frame_mix"] = [m if isinstance(m, str) else "" for m in mixes]  # records older than frame mixes: ""
    if "disturbed" not in df:
        df["disturbed"] = False
    df["disturbed"] = df["disturbed"].fillna(False).astype(bool)
    if "disturbance" not in df:
        df["disturbance"] = ""
    df["method_name"] = df["method"].str.split("/").str[0]
    df["phase"] = df["method"].str.split("/").str[-1]
    df["flow_mode"] = np.where(df["flows"] > 1, "multi", "single")
    if "unit" not in df:
        df["unit"] = None
    fallback = df["scenario_key"] + "__" + df["method_name"]
    df["unit"] = df["unit"].where(df["unit"].notna(), fallback).astype(str)
    labels = {s["unit"]: s.get("label", s.get("method")) for s in searches}
    repeats = {s["unit"]: s.get("repeat", 1) for s in searches}
    df["label"] = [labels.get(u, m) for u, m in zip(df["unit"], df["method_name"])]
    df["repeat"] = [int(repeats.get(u, 1)) for u in df["unit"]]
    factor = speed_factor(*(_column(df, c) for c in ("dut_speed_ns_per_step", "speed_reference_ns", "bpf_ns_per_packet",
                                                     "kernel_ns_per_packet", "kernel_reference_ns", "dut_busy")))
    df["offered_pps"] = judged_pps(df["tx_pps"].to_numpy(), df["intended_pps"].to_numpy(), factor)
    df["offered_mpps"] = df["offered_pps"] / 1e6
    df["tx_mpps"] = df["tx_pps"] / 1e6
    df["rx_mpps"] = df["rx_pps"] / 1e6
    df["tx_gbps"] = df["tx_bps_l1"] / 1e9
    df["rx_gbps"] = df["rx_bps_l1"] / 1e9
    in_result = {t for s in searches for t in s.get("trial_ids", [])}
    searched = {s["unit"] for s in searches}
    df["in_result"] = [(t in in_result) if u in searched else True for t, u in zip(df["trial_id"], df["unit"])]
    notes = df["notes"] if "notes" in df else pd.Series("", index=df.index)
    df["retried"] = notes.astype(str).str.contains("run again", regex=False)  # stalled, whatever it lost
    return df

def _column(df: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column as floats (NaN where missing; all NaN for records older than it)."""
    if name not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)


def frame_axis(df: pd.DataFrame) -> pd.Series:
    """The frame sizes of a frame with ``frame_size`` and ``frame_mix`` as tables and plots show them:
    with a frame mix among them, ordered labels (``64``, ..., ``1518``, ``imix``: the mixes after the
    fixed sizes, ``perfkit.framemix``); else ``frame_size`` itself."""
    mixes = df["frame_mix"] if "frame_mix" in df else pd.Series("", index=df.index)
    if not any(isinstance(m, str) and m for m in mixes):
        return df["frame_size"]
    pairs = list(zip(df["frame_size"], mixes))
    order = [framemix.label(*p) for p in sorted(set(pairs), key=lambda p: framemix.sort_key(*p))]
    return pd.Series(pd.Categorical([framemix.label(*p) for p in pairs], categories=list(dict.fromkeys(order)),
                                    ordered=True), index=df.index, name="frame_size")


def frame_sizes(run: RunData) -> list[int]:
    """The run's frame sizes, ascending."""
    return sorted(int(x) for x in run.trials["frame_size"].unique()) if not run.trials.empty else []

def lab_text(lab: dict[str, Any]) -> str:
    """A lab run's hosts for people: each host's roles, management address and kernel (its facts)."""
    facts = lab.get("facts") or {}
    return "; ".join(f"{h['name']} ({'/'.join(h.get('roles', []))}, {h.get('address', '?')}"
                     + (f", kernel {facts[h['name']]['kernel']}" if facts.get(h["name"], {}).get("kernel") else "") + ")"
                     for h in lab.get("hosts", []))


def run_summary(run: RunData) -> pd.DataFrame:
    """Metadata worth a table: one row per fact (fact, value)."""
    m = run.metadata
    perfkit = m.get("perfkit", {})
    camp = m.get("campaign", {})
    facts = [("run id", run.run_id), ("campaign", f"{camp.get('name', '')} ({camp.get('source', '')})"),
             ("status", m.get("status", "")), ("generator", m.get("generator", "")), ("host", m.get("host", "")),
             ("kernel", m.get("kernel", "")), ("OS", m.get("os", "")), ("CPU", m.get("cpu_model", "")),
             ("CPUs", m.get("cpus", "")),
             ("perfkit", f"{perfkit.get('version', '')} git {perfkit.get('git_sha', '')}"
                         + (" (uncommitted changes)" if perfkit.get("git_dirty") else "")),
             ("units", f"{m.get('units_done', '')} of {m.get('units_total', '')} done"),
             ("trials", len(run.trials)),
             ("wall time", f"{m.get('wall_seconds', 0):.0f} s (estimated {m.get('estimate', {}).get('total_seconds', 0):.0f} s)"),
             ("metrics", m.get("metrics", {}).get("note", "")), ("resumed", len(m.get("resumes", []))),
             ("host check", (m.get("host_check") or {}).get("summary")
              or (m.get("host_check") or {}).get("error", "not run"))]
    if m.get("lab"):
        facts.append(("lab", lab_text(m["lab"])))
    for name, source in m.get("dataplanes", {}).items():
        facts.append((f"dataplane {name}", source.get("package") or source.get("file") or source.get("module", "")))
    for name, digest in m.get("bpf_objects", {}).items():
        facts.append((f"sha256 {name}", digest[:16] + "..."))
    return pd.DataFrame(facts, columns=["fact", "value"]).astype({"value": str})
