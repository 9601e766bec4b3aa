"""This run vs a baseline run: per scenario and figure, the relative change and its noise band.

Figures compared (from ``analysis.throughput_table``), matched by (scenario key, method label, goal):
the received rate at max rate (goal ``max``) and each search goal's lower bound (NDR, PDR ...), in
packets/s, averaged over the unit's repeats.

A repeat whose figure only bounds the DUT's capacity from below (``at_least``: the generator, host
stalls or the testbed set it) and lies below the lowest repeat the DUT itself limited says nothing
more about the DUT: it did at least that much, and more was seen. Such repeats are left out of the
figure's mean and noise (counted in ``n_lower``); the others, lower bounds above a DUT figure
included, all count. Without it, one testbed-limited repeat at half the rate widened the noise band
past a real 3x slowdown.

Noise of one run's figure [%]: the larger of
- *repeats*: 2 x the coefficient of variation (sample std / mean) when the campaign repeated the unit;
- *search bracket*: the goal's relative width (upper - lower) / upper [%], since the true
  throughput lies anywhere in the bracket (a max-rate figure has none).
The change's noise is sqrt(noise_baseline^2 + noise_current^2); a figure *regressed* when it fell
by more than ``band = max(threshold, noise)`` and *improved* when it rose by more. A figure the
baseline has and the current run lacks is ``missing`` (the other way round ``new``); a search that
found a throughput in the baseline but none now (loss even at the minimum rate) is a regression.

Caveats: what changed in how the two runs measured, so that a change may be the testbed's, not the
DUT's. The stall probe's timer period (``host.stallprobe.TRIAL_PERIOD_US``; trials stored before it was
recorded ticked every ``LEGACY_PROBE_PERIOD_US``): each tick takes time of the DUT core, so live
figures move with the period. How much is quoted from the latest run of ``bench/probe_cost.py`` on
record (``perfkit.benchresults``), with its date and host, or the caveat says it was not measured.

Change detection over a *series* of runs (E-divisive, as apache-otava and MongoDB's
signal-processing-algorithms do) was considered: apache-otava 0.8 pins numpy==2.2.0 and scipy<1.17
and pulls in BigQuery, Postgres and Slack clients; signal-processing-algorithms pins numpy<2. Both
conflict with this environment (numpy 2.4, pandas 3), so two-run comparison with noise bands it is.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis import RunData, throughput_table
from perfkit.benchresults import probe_tick_cost
from perfkit.errors import ConfigError

KEY = ["scenario_key", "label", "goal"]
COLUMNS = ["scenario_key", "variant", "frame_size", "flows", "dut_cores", "label", "goal", "metric",
           "baseline_mpps", "current_mpps", "change_pct", "noise_pct", "band_pct", "verdict",
           "n_baseline", "n_current", "note"]
VERDICT_ORDER = ("regression", "missing", "improvement", "new", "within noise")
#: Verdict markers: GitHub shortcodes (pull-request comments) and plain text (HTML reports, terminals).
MARKS = {"github": {"regression": ":red_circle:", "improvement": ":green_circle:", "missing": ":warning:",
                    "new": ":new:", "within noise": ":white_circle:"},
         "text": {"regression": "**REGRESSION**", "improvement": "improved", "missing": "missing",
                  "new": "new", "within noise": ""}}


def informative_repeats(figure: pd.DataFrame) -> np.ndarray:
    """The repeats' throughputs [pps] of one figure (``throughput_table`` rows) that say something
    about the DUT: all but the lower bounds below the lowest DUT-limited repeat (module doc)."""
    found = figure[figure["throughput_pps"].notna()]
    by_dut = found.loc[~found["at_least"].astype(bool), "throughput_pps"]
    if not by_dut.empty:
        found = found[~found["at_least"].astype(bool) | (found["throughput_pps"] >= by_dut.min())]
    return found["throughput_pps"].to_numpy(dtype=float)


def scenario_figures(run: RunData) -> pd.DataFrame:
    """One row per (scenario, label, goal) of a run: value_pps (mean over the informative repeats),
    n (how many), n_lower (lower-bound repeats left out), noise_pct."""
    tp = throughput_table(run)
    cols = [*KEY, "variant", "frame_size", "flows", "dut_cores", "value_pps", "n", "n_lower", "found", "noise_pct",
            "generator_limited"]
    if tp.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in tp.groupby(KEY, sort=False):
        values = informative_repeats(g)
        n = len(values)
        mean = float(values.mean()) if n else math.nan
        rep = 200 * float(values.std(ddof=1)) / mean if n >= 2 and mean > 0 else 0.0
        width = float(g["relative_width"].max()) * 100 if g["relative_width"].notna().any() else 0.0
        first = g.iloc[0]
        rows.append({**dict(zip(KEY, key)), "variant": first["variant"], "frame_size": int(first["frame_size"]),
                     "flows": int(first["flows"]), "dut_cores": int(first["dut_cores"]), "value_pps": mean, "n": n,
                     "found": n > 0, "noise_pct": max(rep, width),
                     "n_lower": int(g["throughput_pps"].notna().sum()) - n,
                     "generator_limited": bool(g["generator_limited"].any())})
    return pd.DataFrame(rows, columns=cols)


@dataclass
class Comparison:
    """The comparison of ``run_id`` with ``baseline_run_id``."""

    run_id: str
    baseline_run_id: str
    threshold_pct: float
    """The smallest change that counts [%] (the noise band can widen it per figure)."""
    rows: pd.DataFrame
    """One row per figure: ``COLUMNS`` (rates in Mpps, changes in %)."""
    caveats: list[str] = field(default_factory=list)
    """What changed in how the runs measured (see module doc), in words."""

    @property
    def regressions(self) -> pd.DataFrame:
        return self.rows[self.rows["verdict"] == "regression"]

    @property
    def counts(self) -> dict[str, int]:
        return {v: int((self.rows["verdict"] == v).sum()) for v in VERDICT_ORDER}

    def summary(self) -> str:
        c = self.counts
        head = (f"{c['regression']} regression(s)" if c["regression"] else "no regression")
        return (f"{head} beyond max(threshold {self.threshold_pct:g} %, noise); {c['improvement']} improvement(s), "
                f"{c['within noise']} within noise, {c['missing']} missing, {c['new']} new")

    def to_dict(self) -> dict[str, Any]:
        rows = json.loads(self.rows.to_json(orient="records"))
        return {"run_id": self.run_id, "baseline_run_id": self.baseline_run_id, "threshold_pct": self.threshold_pct,
                "counts": self.counts, "summary": self.summary(), "regressed": bool(self.counts["regression"]),
                "caveats": self.caveats, "rows": rows}

    def _ordered(self) -> pd.DataFrame:
        order = {v: i for i, v in enumerate(VERDICT_ORDER)}
        d = self.rows.copy()
        d["_o"] = d["verdict"].map(order)
        return d.sort_values(["_o", "change_pct", "scenario_key"], kind="stable").drop(columns="_o")

    def to_markdown(self, marks: str = "github") -> str:
        """A pull-request comment: summary, the figures that changed, the rest folded.

        ``marks``: ``github`` (emoji shortcodes) or ``text`` (for HTML outside GitHub)."""
        if marks not in MARKS:
            raise ConfigError("marks", marks, MARKS)
        lines = [f"### perfkit compare: `{self.run_id}` vs baseline `{self.baseline_run_id}`", "",
                 ("**" + self.summary() + "**") if self.counts["regression"] else self.summary(), ""]
        lines += [f"> :warning: {c}" if marks == "github" else f"> caveat: {c}" for c in self.caveats]
        lines += [""] if self.caveats else []
        d = self._ordered()
        changed = d[d["verdict"] != "within noise"]
        same = d[d["verdict"] == "within noise"]
        header = ["", "scenario", "method", "figure", "baseline [Mpps]", "current [Mpps]", "change", "band"]
        if not changed.empty:
            lines += _md_table(header, [_md_row(r, MARKS[marks]) for r in changed.to_dict("records")])
        if not same.empty:
            lines += ["", f"<details><summary>{len(same)} figure(s) within noise</summary>", ""]
            lines += _md_table(header, [_md_row(r, MARKS[marks]) for r in same.to_dict("records")])
            lines += ["", "</details>"]
        lines += ["", f"_band = max(threshold {self.threshold_pct:g} %, noise from repeats and search brackets); "
                      "rates are the max-rate received rate or the search's lower bound._"]
        return "\n".join(lines) + "\n"

    def to_text(self) -> str:
        """An aligned table for a terminal."""
        d = self._ordered()
        out = [f"run {self.run_id} vs baseline {self.baseline_run_id}: {self.summary()}",
               *(f"caveat: {c}" for c in self.caveats)]
        if d.empty:
            return "\n".join(out)
        table = pd.DataFrame({
            "verdict": d["verdict"], "scenario": d["scenario_key"], "method": d["label"], "figure": d["metric"],
            "baseline Mpps": d["baseline_mpps"].map(_fmt), "current Mpps": d["current_mpps"].map(_fmt),
            "change %": d["change_pct"].map(lambda x: _fmt(x, "+.1f")), "band %": d["band_pct"].map(lambda x: _fmt(x, ".1f"))})
        out.append(table.to_string(index=False))
        return "\n".join(out)


def _fmt(x: Any, spec: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _md_row(r: dict[str, Any], marks: dict[str, str]) -> list[str]:
    return [marks.get(r["verdict"], ""), f"`{r['scenario_key']}`", r["label"], r["metric"], _fmt(r["baseline_mpps"]),
            _fmt(r["current_mpps"]), _fmt(r["change_pct"], "+.1f") + (" %" if pd.notna(r["change_pct"]) else ""),
            "±" + _fmt(r["band_pct"], ".1f") + " %"]


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---" if i < 4 else "---:" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"] + ["| " + " | ".join(r) + " |" for r in rows]


#: The stall probe's period of trials stored before it was recorded [µs].
LEGACY_PROBE_PERIOD_US = 200.0


def probe_periods(run: RunData) -> set[float]:
    """The stall probe's timer periods [µs] of a run's live trials (their ``stalls`` evidence; trials
    without any, such as simulated ones, have none)."""
    if run.trials.empty or "stalls" not in run.trials:
        return set()
    out = set()
    for text in run.trials["stalls"].dropna():
        cpus = json.loads(text) if isinstance(text, str) else text
        out |= {float(c.get("period_us") or LEGACY_PROBE_PERIOD_US) for c in cpus.values()}
    return out


def caveats(current: RunData, baseline: RunData) -> list[str]:
    """What changed in how the runs measured (see module doc)."""
    periods = [probe_periods(r) for r in (current, baseline)]
    now, then = (" and ".join(f"{p:g}" for p in sorted(ps)) for ps in periods)
    if not now or not then or now == then:
        return []
    return [f"the stall probe ticked every {then} µs in the baseline and every {now} µs in this run: each tick "
            f"takes time of the DUT core, so live figures move with the period, not with the DUT; "
            f"{probe_tick_cost(periods[0] | periods[1])}"]


def compare_runs(current: RunData, baseline: RunData, threshold_pct: float = 5.0) -> Comparison:
    """Compare ``current`` with ``baseline`` figure by figure (see module doc)."""
    if not (isinstance(threshold_pct, (int, float)) and math.isfinite(threshold_pct) and threshold_pct >= 0):
        raise ConfigError("threshold", threshold_pct, "a percentage >= 0, e.g. 5")
    cur, base = scenario_figures(current), scenario_figures(baseline)
    merged = base.merge(cur, on=KEY, how="outer", suffixes=("_b", "_c"), indicator=True)
    rows = []
    for r in merged.to_dict("records"):
        side = "_c" if r["_merge"] != "left_only" else "_b"
        row = {**{k: r[k] for k in KEY}, **{k: r[f"{k}{side}"] for k in ("variant", "frame_size", "flows", "dut_cores")},
               "metric": "max rate rx" if r["goal"] == "max" else str(r["goal"]).upper(),
               "baseline_mpps": r["value_pps_b"] / 1e6 if r["_merge"] != "right_only" else math.nan,
               "current_mpps": r["value_pps_c"] / 1e6 if r["_merge"] != "left_only" else math.nan,
               "n_baseline": int(r["n_b"]) if r["_merge"] != "right_only" else 0,
               "n_current": int(r["n_c"]) if r["_merge"] != "left_only" else 0, "note": ""}
        nb = r["noise_pct_b"] if r["_merge"] != "right_only" else 0.0
        nc = r["noise_pct_c"] if r["_merge"] != "left_only" else 0.0
        row["noise_pct"] = float(np.hypot(nb or 0.0, nc or 0.0))
        row["band_pct"] = max(threshold_pct, row["noise_pct"])
        b, c = row["baseline_mpps"], row["current_mpps"]
        row["change_pct"] = (c - b) / b * 100 if b and not math.isnan(b) and not math.isnan(c) else math.nan
        if r["_merge"] == "left_only":
            row["verdict"], row["note"] = "missing", "not in the current run"
        elif r["_merge"] == "right_only":
            row["verdict"], row["note"] = "new", "not in the baseline"
        elif math.isnan(b) and math.isnan(c):
            row["verdict"], row["note"] = "within noise", "no throughput found in either run"
        elif math.isnan(c):
            row["verdict"], row["note"] = "regression", "no throughput found now (loss even at the minimum rate)"
        elif math.isnan(b):
            row["verdict"], row["note"] = "improvement", "no throughput found in the baseline"
        elif row["change_pct"] < -row["band_pct"]:
            row["verdict"] = "regression"
        elif row["change_pct"] > row["band_pct"]:
            row["verdict"] = "improvement"
        else:
            row["verdict"] = "within noise"
        limited = (r.get("generator_limited_b") is True) or (r.get("generator_limited_c") is True)
        if limited:
            row["note"] = (row["note"] + "; " if row["note"] else "") + "generator-limited: the generator, not the DUT, may be the limit"
        for side, suffix in (("baseline", "_b"), ("current", "_c")):
            k = r.get(f"n_lower{suffix}")
            if isinstance(k, (int, float)) and k > 0:
                row["note"] = ((row["note"] + "; " if row["note"] else "") +
                               f"{int(k)} {side} repeat(s) below a DUT-limited one left out: only lower bounds")
        rows.append(row)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if not frame.empty:
        frame = frame.sort_values(["label", "goal", "variant", "flows", "dut_cores", "frame_size"],
                                  kind="stable").reset_index(drop=True)
    return Comparison(current.run_id, baseline.run_id, float(threshold_pct), frame, caveats(current, baseline))
