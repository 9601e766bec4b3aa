"""Who ran on the DUT cores during the run's trials (``TrialResult.dut_core_time``).

A DUT figure is the DUT's only when its cores ran the DUT: work of perfkit's own (its metrics
servers, notebook kernel, CLI: kept off the DUT cores by ``perfkit.host.housekeeping``) or of anyone
else there is time the packet threads did not get.

``core_time_frame(run)`` -- tidy, one row per trial x DUT CPU: trial_id, method, the scenario columns
(``SCENARIO_COLUMNS``), cpu, and the share of the trial window [0..1] each kind of task ran on that
CPU: packet (the DUT's packet threads), perfkit, other, idle.

``core_share_table(run)`` -- one row per scenario: trials, and the median and maximum over its
trials of ``dut_perfkit_share`` and ``dut_others_share`` in percent of the DUT cores' time
(perfkit_median_pct, perfkit_max_pct, others_median_pct, others_max_pct).

``core_share_note(run)`` -- one line for the report: the same over the whole run, or why there is
nothing to say (trials recorded before perfkit measured it, or not on the xdp testbed).
"""
from __future__ import annotations

import json

import pandas as pd

from perfkit.analysis.run import SCENARIO_COLUMNS, RunData

CLASSES = ("packet", "perfkit", "other", "idle")
SHARES = ("dut_perfkit_share", "dut_others_share")


def _measured(run: RunData) -> pd.DataFrame:
    t = run.trials
    if t.empty or not set(SHARES) <= set(t):
        return t.iloc[0:0]
    return t[t["dut_perfkit_share"].notna()]


def core_time_frame(run: RunData) -> pd.DataFrame:
    """One row per trial x DUT CPU (module doc)."""
    cols = ["trial_id", "method", *SCENARIO_COLUMNS, "cpu", *CLASSES]
    t = _measured(run)
    rows = []
    for rec in t.to_dict("records"):
        per_cpu = rec.get("dut_core_time")
        per_cpu = json.loads(per_cpu) if isinstance(per_cpu, str) else per_cpu or {}
        for cpu, shares in per_cpu.items():
            rows.append({**{c: rec.get(c) for c in cols[:-5]}, "cpu": int(cpu),
                         **{k: float(shares.get(k, 0.0)) for k in CLASSES}})
    return pd.DataFrame(rows, columns=cols)


def core_share_table(run: RunData) -> pd.DataFrame:
    """Per scenario, perfkit's and others' shares of the DUT cores [%] (module doc)."""
    cols = [*SCENARIO_COLUMNS, "trials", "perfkit_median_pct", "perfkit_max_pct", "others_median_pct",
            "others_max_pct"]
    t = _measured(run)
    if t.empty:
        return pd.DataFrame(columns=cols)
    g = t.groupby(SCENARIO_COLUMNS, dropna=False, sort=True)
    out = pd.DataFrame({
        "trials": g.size(),
        "perfkit_median_pct": g["dut_perfkit_share"].median() * 100,
        "perfkit_max_pct": g["dut_perfkit_share"].max() * 100,
        "others_median_pct": g["dut_others_share"].median() * 100,
        "others_max_pct": g["dut_others_share"].max() * 100,
    }).reset_index()
    return out[cols]


def core_share_note(run: RunData) -> str:
    """One line on who else ran on the DUT cores in this run (module doc)."""
    t = _measured(run)
    total = len(run.trials)
    if t.empty:
        return ("no trial of this run recorded who ran on the DUT cores (recorded by the xdp testbed "
                "since perfkit measures it)") if total else "no trials"
    p, o = t["dut_perfkit_share"] * 100, t["dut_others_share"] * 100
    return (f"Of the DUT cores' time in {len(t)} of {total} trials, perfkit's own processes took a median "
            f"{p.median():.2f} % (at most {p.max():.2f} %), other tasks a median {o.median():.2f} % "
            f"(at most {o.max():.2f} %); the rest was the DUT's packet threads and idle time.")
