"""A run, loaded for analysis (``RunData``, ``load_run``), its trial frame, and facts about it.

``trial_frame`` -- trial: the store's columns (``trial.RECORD_COLUMNS``, plus ``unit``/``attempt``
from campaigns) and
    method_name  str    what ran it: maxrate, ndrpdr, ndr, sweep, latency ... (before the first '/')
    phase        str    the search phase (max, short, confirm, linear, binary, 10% ...)
    flow_mode    str    ``single`` (1 flow) or ``multi``
    scenario_key str    ``pgwu-ul-64B-1flow-1core`` (``Scenario.key``)
    unit, label  str    the campaign unit and its method label (``<scenario>__<method>`` outside campaigns)
    repeat       int    the unit's repeat (1 outside campaigns)
    offered_pps  float  the rate the trial is judged at: intended, or offered if the generator fell short
    offered_mpps, tx_mpps, rx_mpps  float  [Mpps];  tx_gbps, rx_gbps  float  L1 [Gbit/s]
    in_result    bool   the trial is part of its unit's final search (False: a superseded trial)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from perfkit.store import DEFAULT_ROOT, RunStore

L1_OVERHEAD = 20
SCENARIO_COLUMNS = ["scenario_key", "dataplane", "direction", "frame_size", "flows", "flow_mode", "dut_cores"]


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

def scenario_key(row: Any) -> str:
    return (f"{row['dataplane']}-{row['direction']}-{int(row['frame_size'])}B-{int(row['flows'])}flow-"
            f"{int(row['dut_cores'])}core" + ("-csum" if bool(row.get("udp_csum", False)) else ""))

def trial_frame(trials: pd.DataFrame, searches: Sequence[dict[str, Any]] = ()) -> pd.DataFrame:
    """The store's trials with the derived columns of the module doc."""
    if trials.empty:
        return trials
    df = trials.copy()
    df["method_name"] = df["method"].str.split("/").str[0]
    df["phase"] = df["method"].str.split("/").str[-1]
    df["flow_mode"] = np.where(df["flows"] > 1, "multi", "single")
    df["scenario_key"] = [scenario_key(r) for r in df.to_dict("records")]
    if "unit" not in df:
        df["unit"] = None
    fallback = df["scenario_key"] + "__" + df["method_name"]
    df["unit"] = df["unit"].where(df["unit"].notna(), fallback).astype(str)
    labels = {s["unit"]: s.get("label", s.get("method")) for s in searches}
    repeats = {s["unit"]: s.get("repeat", 1) for s in searches}
    df["label"] = [labels.get(u, m) for u, m in zip(df["unit"], df["method_name"])]
    df["repeat"] = [int(repeats.get(u, 1)) for u in df["unit"]]
    limited = df["tx_pps"] < df["intended_pps"] * 0.95
    df["offered_pps"] = np.where(limited, df["tx_pps"], df["intended_pps"])
    df["offered_mpps"] = df["offered_pps"] / 1e6
    df["tx_mpps"] = df["tx_pps"] / 1e6
    df["rx_mpps"] = df["rx_pps"] / 1e6
    df["tx_gbps"] = df["tx_bps_l1"] / 1e9
    df["rx_gbps"] = df["rx_bps_l1"] / 1e9
    in_result = {t for s in searches for t in s.get("trial_ids", [])}
    searched = {s["unit"] for s in searches}
    df["in_result"] = [(t in in_result) if u in searched else True for t, u in zip(df["trial_id"], df["unit"])]
    return df

def frame_sizes(run: RunData) -> list[int]:
    """The run's frame sizes, ascending."""
    return sorted(int(x) for x in run.trials["frame_size"].unique()) if not run.trials.empty else []

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
             ("metrics", m.get("metrics", {}).get("note", "")), ("resumed", len(m.get("resumes", [])))]
    for name, digest in m.get("bpf_objects", {}).items():
        facts.append((f"sha256 {name}", digest[:16] + "..."))
    return pd.DataFrame(facts, columns=["fact", "value"]).astype({"value": str})

def run_notes(run: RunData) -> list[str]:
    """What a reader of the report must know about the run as a whole."""
    m = run.metadata
    notes = []
    if m.get("generator") == "sim":
        notes.append("simulated DUTs (generator sim): the figures show the model, not a measurement")
    status = m.get("status")
    if status and status != "complete":
        notes.append(f"the run is {status}: {m.get('units_done', '?')} of {m.get('units_total', '?')} units done")
    for unit, err in (m.get("units_failed") or {}).items():
        notes.append(f"unit {unit} failed: {err}")
    if m.get("resumes"):
        notes.append(f"resumed {len(m['resumes'])} time(s); interrupted searches were replayed from their stored trials")
    if not run.trials.empty and run.trials["shared_cores"].any():
        notes.append("some trials had DUT and generator on a shared core: their figures are pessimistic")
    from perfkit.analysis.throughput import throughput_table

    tp = throughput_table(run)
    limited = tp[tp["generator_limited"]]["scenario_key"].nunique() if not tp.empty else 0
    if limited:
        notes.append(f"{limited} scenario(s) were generator-limited: the generator, not the DUT, set the maximum")
    met = m.get("metrics") or {}
    if met.get("note"):
        notes.append(met["note"])
    if met.get("push_failures"):
        notes.append(f"{met['push_failures']} push(es) failed; backfill with `perfkit push --run {run.run_id}`")
    return notes
