"""The report's perf pages: per scenario, its profiled trial, a table of the top functions and a
flame graph, and one summary row of where the DUT cores' samples went."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from perfkit.perf.flamegraph import flamegraph_html, flamegraph_svg
from perfkit.perf.folded import (is_idle, parse_folded, process_table, symbol_kind, symbol_table, top_symbols,
                                  untagged)
from perfkit.perf.store import perf_trial_ids, read_folded


def scenario_profiles(trials: pd.DataFrame, run_dir: str | Path) -> pd.DataFrame:
    """One trial with folded stacks per scenario: the one that received the most packets per second.

    ``trials``: a trial frame (``perfkit.analysis.trial_frame``; needs trial_id, scenario_key, rx_pps).
    Columns: the trial's columns, plus ``perf_trials`` (how many of the scenario's trials have stacks).
    Empty when the run has no perf data.
    """
    ids = set(perf_trial_ids(run_dir))
    if trials.empty or not ids:
        return pd.DataFrame()
    df = trials[trials["trial_id"].isin(ids)]
    if df.empty:
        return pd.DataFrame()
    counts = df.groupby("scenario_key")["trial_id"].count().rename("perf_trials")
    best = df.sort_values("rx_pps", ascending=False).drop_duplicates("scenario_key")
    return best.join(counts, on="scenario_key").sort_values("scenario_key", ignore_index=True)


def top_table(folded: str, n: int = 15) -> pd.DataFrame:
    """The report's table: the top ``n`` kernel and BPF functions by self share, in percent."""
    rows = [{"symbol": s.symbol, "kind": s.kind, "self %": 100 * s.self_share,
             "inclusive %": 100 * s.inclusive_share, "self samples": s.self_samples}
            for s in top_symbols(folded, n)]
    return pd.DataFrame(rows, columns=["symbol", "kind", "self %", "inclusive %", "self samples"])


@dataclass
class ScenarioProfile:
    """One scenario's section of the report: its profiled trial, table and flame graph."""

    scenario_key: str
    trial_id: str
    title: str
    """``<scenario_key>: <method>, <rx Mpps> received, <samples> samples``."""
    folded: str
    top: pd.DataFrame
    """``top_table``."""

    def flamegraph_html(self, max_height: int = 900) -> str:
        return flamegraph_html(flamegraph_svg(self.folded, f"{self.scenario_key}: DUT cores"), max_height)


def scenario_sections(trials: pd.DataFrame, run_dir: str | Path, n: int = 15) -> list[ScenarioProfile]:
    """Per scenario with perf data, its profiled trial (``scenario_profiles``), top table and stacks."""
    out = []
    for r in scenario_profiles(trials, run_dir).itertuples():
        folded = read_folded(run_dir, r.trial_id)
        samples = sum(c for _, c in parse_folded(folded))
        title = (f"{r.scenario_key}: {getattr(r, 'method', 'trial')}, {r.rx_pps / 1e6:.3f} Mpps received, "
                 f"{samples} samples (trial {r.trial_id}; {r.perf_trials} trial(s) of the scenario recorded)")
        out.append(ScenarioProfile(r.scenario_key, r.trial_id, title, folded, top_table(folded, n)))
    return out


def summary_table(sections: Sequence[ScenarioProfile]) -> pd.DataFrame:
    """One row per scenario: where the DUT cores' samples went, in percent of all samples.

    Columns: scenario_key, samples, packet threads % (NAPI and cpumap kernel threads: the DUT's
    packet path; the rest is other work the host ran on those cores), idle %, BPF programs % (their
    own code), kernel % (kernel functions as leaves), other % (user space), top BPF program, top
    kernel symbol (by self share).
    """
    rows = []
    for sec in sections:
        tab = symbol_table(sec.folded)
        stacks = parse_folded(sec.folded)
        total = sum(c for _, c in stacks)
        leaf = Counter()
        for frames, count in stacks:
            leaf["idle" if is_idle(frames[0]) else symbol_kind(frames[-1])] += count
        bpf = tab[tab["kind"] == "bpf"].sort_values("self_samples", ascending=False)
        kern = tab[tab["kind"] == "kernel"].sort_values("self_samples", ascending=False)
        procs = process_table(sec.folded)
        rows.append({"scenario_key": sec.scenario_key, "samples": total,
                     "packet threads %": 100 * procs.loc[procs["packet_thread"], "share"].sum(),
                     "idle %": 100 * leaf["idle"] / total, "BPF programs %": 100 * leaf["bpf"] / total,
                     "kernel %": 100 * leaf["kernel"] / total, "other %": 100 * leaf["other"] / total,
                     "top BPF program": bpf["symbol"].iloc[0] if len(bpf) else "",
                     "top kernel symbol": kern["symbol"].iloc[0] if len(kern) else ""})
    return pd.DataFrame(rows, columns=["scenario_key", "samples", "packet threads %", "idle %", "BPF programs %",
                                       "kernel %", "other %", "top BPF program", "top kernel symbol"])


def changed_functions(before: str, after: str, n: int = 10) -> pd.DataFrame:
    """The ``n`` functions whose share of the DUT cores' busy (non-idle) samples changed most between
    two profiles: what a knob made cheaper or dearer.

    Columns: symbol, kind, before % and after % (inclusive: the function and what it calls, of the
    busy samples), change (after - before, percentage points)."""
    shares = []
    for folded in (untagged(before), untagged(after)):
        busy = sum(c for frames, c in parse_folded(folded) if not is_idle(frames[0])) or 1
        tab = symbol_table(folded)
        shares.append(tab.set_index("symbol")[["kind", "inclusive_samples"]].assign(
            share=lambda t, b=busy: 100 * t["inclusive_samples"] / b))
    both = pd.merge(shares[0][["kind", "share"]], shares[1][["kind", "share"]], how="outer", left_index=True,
                    right_index=True, suffixes=("_before", "_after"))
    both["kind"] = both["kind_after"].fillna(both["kind_before"])
    both = both.fillna({"share_before": 0.0, "share_after": 0.0})
    both["change"] = both["share_after"] - both["share_before"]
    both = both.reindex(both["change"].abs().sort_values(ascending=False).index).head(n)
    return pd.DataFrame({"symbol": both.index, "kind": both["kind"].values, "before %": both["share_before"].values,
                         "after %": both["share_after"].values, "change": both["change"].values})
