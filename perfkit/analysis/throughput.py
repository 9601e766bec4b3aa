"""Throughput, search and latency frames of a run.

``throughput_table`` -- unit x goal (maxrate: goal ``max``; sweep: ``sweep``, its highest step of the
lossless run from the start; ndrpdr: ``ndr``, ``pdr0.5%`` ...):
    unit, scenario_key, dataplane, variant, frame_size, frame_mix, flows, flow_mode, dut_cores,
    shared_cores, label, method, repeat, goal, loss_tolerance,
    throughput_pps/_mpps  the figure: maxrate: received rate; searches: the goal's lower bound [frames/s]
    throughput_gbps       L1 Gbit/s of ``throughput_pps`` user-side frames ((frame_size + 20) x 8 bits;
                          a frame mix (``frame_mix`` imix): its mean frame + 20, 381.83 x 8 bits)
    upper_pps/_mpps       the goal's upper bound (maxrate: the offered rate); relative_width [1]
    trial_id              the trial behind the figure (maxrate: it; searches: the good one at the bound)
    offered_mpps, rx_mpps, rx_gbps, loss_ratio   of that trial (rx_gbps: received L1 Gbit/s)
    latency_p50_us, latency_p90_us, latency_p99_us  of that trial [us] (NaN if not measured)
    hosts                 the hosts that measured that trial, else the unit's first (``hosts_text``:
                          ``local``, or a lab's ``DUT dut1, tester tester1 tester2``)
    ceiling_hosts         the generator hosts of that trial that reached their ceiling (a lab), space-
                          separated; with ``limited_by`` generator: whose ceiling set the figure
    trials, trial_seconds, notes
    limited_by            what set the figure: dut, generator, host stalls, testbed or max rate
                          (``search.LIMITS``)
    at_least              the figure is only a lower bound of the DUT's capacity (the generator or the
                          maximum rate, not the DUT, set it): plots hatch it, tables write ``≥``
    generator_limited     ``limited_by == "generator"``
    disturbed_trials      trials of the unit whose loss host stalls explained (run again)
    disturbed_seconds     their traffic time [s]

``latency_table`` -- trial x percentile with latency: scenario columns, label, ``load`` (``10% of
NDR`` for latency trials, ``100% of NDR`` / ``100% of PDR0.5%`` for an ndrpdr's latency at its goals,
else ``NDR`` / ``max`` for the figure trials), at_least (the load is a fraction of a throughput that
is only a lower bound), percentile (p50, p90, p99, p99.9, max), latency_us.

``goal_latency_table`` -- unit x goal x fraction, for the latency ndrpdr measured at its goals once
found (``latency_fractions``; seed 003's latency at NDR and PDR): unit, scenario columns, label,
repeat, goal, fraction [1], load (``100% of NDR``), throughput_mpps (the goal's lower bound),
at_least (that throughput is only a lower bound, so the load is a fraction of a lower bound of the
NDR/PDR), limited_by (what set the throughput), rate_mpps (offered), loss_ratio, latency_<p>_us for
p50, p90, p99, p999 (p99.9), max, ipdv_<p>_us for p50, p99, max (NaN if not measured), trial_id.

``best_worst_single`` -- seed 003's bars: per bestworst unit, its best-of-N and worst-of-N rows, and
the single-run binary searches (``ndr``/``pdr`` methods) of the same scenario and loss tolerance:
``throughput_table``'s columns plus series (``best-of-N``, ``single run``, ``worst-of-N``).

``disturbed_table`` -- one row per disturbed trial: unit, scenario columns, label, phase,
offered_mpps, lost_packets, dut_stall_us, tester_stall_us, steal_us (summed over the trial's probed
CPUs), retried (run again; else its loss counted), disturbance (the evidence).

``search_path`` -- trial of a search unit, in order: unit, scenario_key, label, repeat, step (1..),
phase, duration, offered_mpps, loss_ratio, verdict (``no loss``, ``loss <= <pdr>``, ``loss``,
``disturbed, run again``),
in_result, attempt, lower_mpps, upper_mpps (the unit's first goal).
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from perfkit import framemix
from perfkit.analysis.run import SCENARIO_COLUMNS, RunData, frame_axis
from perfkit.search.limits import LIMITS, LOWER_BOUNDS, fell_short, stored_goal_limit, stored_maxrate_limit

#: Latency percentiles shown, as (column suffix, label).
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))


def judged_loss(trials: pd.DataFrame) -> pd.Series:
    """The loss searches judge (``perfkit.search.judging``): the DUT's (``dut_loss_ratio``), or the
    whole loss in runs stored before trials had it."""
    return trials["dut_loss_ratio"].fillna(trials["loss_ratio"]) if "dut_loss_ratio" in trials else trials["loss_ratio"]


def _figure_trial(trials: pd.DataFrame, lower: float | None, tolerance: float) -> pd.Series | None:
    """The trial a bound rests on: good, at the bound's rate, longest."""
    if trials.empty:
        return None
    if lower is None:
        return None
    good = trials[(judged_loss(trials) <= tolerance + 1e-12) & ~trials["retried"]]
    at = good[np.isclose(good["offered_pps"], lower, rtol=1e-6)]
    pick = at if not at.empty else good[good["offered_pps"] <= lower * (1 + 1e-6)]
    if pick.empty:
        return None
    return pick.sort_values(["duration", "offered_pps"]).iloc[-1]

def _maxrate_limit(t: pd.Series | None) -> str:
    """What limited a max-rate figure stored before searches said (``SearchResult.limited_by``)."""
    if t is None:
        return ""
    seconds = t["elapsed"] if t["elapsed"] > 0 else t["duration"]
    return stored_maxrate_limit(bool(judged_loss(t.to_frame().T).iloc[0] > 0), bool(t["disturbed"]),
                                bool(fell_short(t["tx_packets"] / seconds, t["intended_pps"])))


def _goal_limit(res: dict[str, Any], lower: float | None, upper: float | None, trials: pd.DataFrame) -> str:
    """The same for a search goal (``stored_goal_limit``)."""
    best = trials["offered_pps"].max() if not trials.empty else math.nan
    return stored_goal_limit(bool(res.get("generator_limited")), lower, upper, best)


def hosts_text(hosts: str | dict[str, list[str]] | None) -> str:
    """Which hosts measured a trial, for people: ``DUT dut1, tester tester1 tester2``; ``local``
    when this machine did (``TrialResult.hosts``, or its JSON column)."""
    hosts = _unjson(hosts)
    if not hosts:
        return "local"
    return ", ".join(f"{'DUT' if role == 'dut' else role} {' '.join(names)}" for role, names in hosts.items())


def _unjson(value: Any) -> Any:
    """A trial field as stored (a JSON string; empty: none) or as read back (the value itself)."""
    if isinstance(value, str):
        return json.loads(value) if value.strip() else None
    return value


def _row_from_trial(row: dict[str, Any], t: pd.Series | None) -> None:
    keys = ("trial_id", "offered_mpps", "rx_mpps", "rx_gbps", "loss_ratio")
    for k in keys:
        row[k] = t[k] if t is not None else (None if k == "trial_id" else math.nan)
    if t is not None:   # else the unit's (``base``)
        row["hosts"] = hosts_text(t.get("hosts"))
    row["ceiling_hosts"] = " ".join((_unjson(t.get("ceiling_hosts")) or []) if t is not None else [])
    for suffix in ("p50", "p90", "p99"):
        col = f"latency_{suffix}_ns"
        row[f"latency_{suffix}_us"] = float(t[col]) / 1e3 if t is not None and col in t and pd.notna(t[col]) else math.nan

def _units(run: RunData) -> list[dict[str, Any]]:
    """Search summaries, or pseudo-summaries built from the trials (runs made outside campaigns)."""
    if run.searches:
        return run.searches
    out = []
    for unit, g in run.trials.groupby("unit", sort=False):
        first = g.iloc[0]
        name = first["method_name"]
        if name == "maxrate":
            t = g.iloc[-1]
            result = {"lower_bound": float(t["rx_pps"]), "upper_bound": float(t["tx_pps"]), "goals": []}
        else:
            good = g[judged_loss(g) <= 0]
            bad = g[judged_loss(g) > 0]
            lower = float(good["offered_pps"].max()) if not good.empty else None
            upper = float(bad[bad["offered_pps"] > (lower or 0)]["offered_pps"].min()) if not bad.empty else None
            goal = {"name": "ndr", "loss_tolerance": 0.0, "lower_bound": lower,
                    "upper_bound": upper if upper is not None and not math.isnan(upper) else None}
            result = {"lower_bound": lower, "upper_bound": goal["upper_bound"], "goals": [goal]}
        scenario = {k: first[k] for k in ("dataplane", "frame_size", "flows", "dut_cores")}
        out.append({"unit": unit, "scenario": scenario, "scenario_key": first["scenario_key"], "method": name,
                    "label": name, "repeat": 1, "shared_cores": bool(first.get("shared_cores", False)),
                    "result": {**result, "trial_count": len(g), "trial_seconds": float(g["duration"].sum()),
                               "generator_limited": False, "notes": []},
                    "trial_ids": list(g["trial_id"])})
    return out

def throughput_table(run: RunData) -> pd.DataFrame:
    """One row per unit x goal (see module doc)."""
    rows = []
    trials = run.trials
    for s in _units(run):
        ut = trials[trials["trial_id"].isin(s.get("trial_ids", []))] if not trials.empty else trials
        if ut.empty:  # a unit that has not run a trial has no figure
            continue
        res = s["result"]
        base = {"unit": s["unit"], **{k: ut.iloc[0][k] for k in SCENARIO_COLUMNS},
                "shared_cores": bool(s.get("shared_cores", False)), "label": s.get("label", s["method"]),
                "method": s["method"], "repeat": int(s.get("repeat", 1)), "trials": int(res.get("trial_count", len(ut))),
                "trial_seconds": float(res.get("trial_seconds", 0.0)),
                "disturbed_trials": int(ut["disturbed"].sum()),
                "disturbed_seconds": float(ut.loc[ut["disturbed"], "duration"].sum()),
                "hosts": hosts_text(ut.iloc[0].get("hosts")), "notes": "; ".join(res.get("notes", []))}
        if s["method"] == "maxrate" or not res.get("goals"):
            t = ut.iloc[-1] if not ut.empty else None
            # a sweep's figure is its highest lossless step, not what the maximum rate brought through
            row = {**base, "goal": "sweep" if s["method"] == "sweep" else "max", "loss_tolerance": math.nan, "throughput_pps": res.get("lower_bound"),
                   "upper_pps": res.get("upper_bound"), "relative_width": math.nan,
                   "limited_by": res.get("limited_by") or _maxrate_limit(t)}
            _row_from_trial(row, t)
            rows.append(row)
            continue
        for g in res["goals"]:
            lower, upper = g.get("lower_bound"), g.get("upper_bound")
            row = {**base, "goal": g["name"], "loss_tolerance": g["loss_tolerance"], "throughput_pps": lower,
                   "upper_pps": upper,
                   "relative_width": (upper - lower) / upper if lower is not None and upper else math.nan,
                   "limited_by": g.get("limited_by") or _goal_limit(res, lower, upper, ut)}
            _row_from_trial(row, _figure_trial(ut[~ut["phase"].str.startswith("latency ")], lower,
                                               g["loss_tolerance"]))
            rows.append(row)
    columns = ["unit", *SCENARIO_COLUMNS, "shared_cores", "label", "method", "repeat", "goal", "loss_tolerance",
               "throughput_pps", "throughput_mpps", "throughput_gbps", "upper_pps", "upper_mpps", "relative_width", "trial_id",
               "offered_mpps", "rx_mpps", "rx_gbps", "loss_ratio", "latency_p50_us", "latency_p90_us",
               "latency_p99_us", "hosts", "ceiling_hosts", "trials", "trial_seconds", "limited_by", "at_least", "generator_limited",
               "disturbed_trials", "disturbed_seconds", "notes"]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=columns)
    df["at_least"] = df["limited_by"].isin(LOWER_BOUNDS)
    df["generator_limited"] = df["limited_by"] == "generator"
    df["throughput_pps"] = pd.to_numeric(df["throughput_pps"], errors="coerce")
    df["upper_pps"] = pd.to_numeric(df["upper_pps"], errors="coerce")
    df["throughput_mpps"] = df["throughput_pps"] / 1e6
    df["upper_mpps"] = df["upper_pps"] / 1e6
    l1_bytes = [framemix.mean_l1_bytes(f, m) for f, m in zip(df["frame_size"], df["frame_mix"])]
    df["throughput_gbps"] = df["throughput_pps"] * np.array(l1_bytes) * 8 / 1e9
    df["_frame_order"] = [framemix.sort_key(f, m) for f, m in zip(df["frame_size"], df["frame_mix"])]
    return df.sort_values(["label", "goal", "dataplane", "variant", "flows", "dut_cores", "_frame_order", "repeat"],
                          kind="stable")[columns].reset_index(drop=True)

def search_table(run: RunData) -> pd.DataFrame:
    """``throughput_table`` rows of the searches (everything but maxrate)."""
    tp = throughput_table(run)
    return tp[tp["goal"] != "max"].reset_index(drop=True)

def goals(tp: pd.DataFrame) -> list[str]:
    """The goals of a throughput table, max rate first."""
    found = list(dict.fromkeys(tp["goal"])) if not tp.empty else []
    return sorted(found, key=lambda g: (g != "max", g != "ndr", g))

def throughput_pivot(tp: pd.DataFrame, value: str = "throughput_mpps", mark: bool = False) -> pd.DataFrame:
    """``value`` (mean over repeats) with rows (goal, DUT cores, frame size) and columns (variant, flow
    mode). ``mark``: as text (``pivot_cell``), every measured cell saying what it holds: a figure, a
    lower bound ``≥ figure``, or why there is none; scenarios the run did not measure say
    ``not measured``."""
    if tp.empty:
        return pd.DataFrame()
    tp = tp.assign(frame_size=frame_axis(tp))  # a frame mix: labelled, after the fixed sizes
    index, columns = ["goal", "dut_cores", "frame_size"], ["variant", "flow_mode"]
    if not mark:
        return tp.pivot_table(index=index, columns=columns, values=value, aggfunc="mean")
    cells = {key: pivot_cell(g, value) for key, g in tp.groupby(index + columns, sort=True)}
    text = pd.Series(cells, dtype=object)
    text.index.names = index + columns
    return text.unstack(columns).fillna("not measured")

def pivot_cell(rows: pd.DataFrame, value: str = "throughput_mpps") -> str:
    """One scenario and goal's repeats as a table cell: the mean of ``value`` where a repeat has it
    (``≥ `` before it when any of those is only a lower bound, ``at_least``; ``(k of n repeats)`` when
    some have none); with none at all, why: ``no rate passed`` (a search) or ``no figure`` (max rate),
    and what limited the units (``limited_by``)."""
    found = rows[rows[value].notna()]
    if found.empty:
        limits = sorted({str(x) for x in rows["limited_by"].dropna()} - {""})
        none = "no figure" if set(rows["goal"]) == {"max"} else "no rate passed"
        return none + (f" (limited by {', '.join(limits)})" if limits else "")
    text = ("≥ " if found["at_least"].astype(bool).any() else "") + f"{found[value].mean():.3f}"
    return text if len(found) == len(rows) else f"{text} ({len(found)} of {len(rows)} repeats)"

def limits_table(tp: pd.DataFrame) -> pd.DataFrame:
    """Per goal, how many figures each side limited: goal, figures, and one column per ``LIMITS``."""
    cols = ["goal", "figures", *LIMITS]
    if tp.empty:
        return pd.DataFrame(columns=cols)
    counts = pd.crosstab(tp["goal"], tp["limited_by"]).reindex(columns=list(LIMITS), fill_value=0)
    counts.insert(0, "figures", counts.sum(axis=1))
    order = [g for g in goals(tp) if g in counts.index]
    return counts.loc[order].reset_index()[cols]

def latency_table(run: RunData) -> pd.DataFrame:
    """Latency percentiles, tidy (see module doc): latency-method trials, else the figure trials."""
    t = run.trials
    cols = [*SCENARIO_COLUMNS, "label", "load", "at_least", "percentile", "latency_us"]
    if t.empty or "latency_p50_ns" not in t:
        return pd.DataFrame(columns=cols)
    lat = t[(t["method_name"] == "latency") & t["in_result"] & t["phase"].str.endswith("%")].copy()
    lat["load"] = lat["phase"] + " of NDR"
    lat["at_least"] = False
    at_goals = goal_latency_table(run)
    if not at_goals.empty:
        lat = pd.concat([lat, t.merge(at_goals[["trial_id", "load", "at_least"]], on="trial_id")])
    if lat.empty:
        tp = throughput_table(run)
        ids = tp.dropna(subset=["trial_id"])
        lat = t.merge(ids[["trial_id", "goal", "at_least"]], on="trial_id")
        lat["load"] = lat["goal"].str.upper().where(lat["goal"] != "max", "max rate")
    rows = []
    for rec in lat.to_dict("records"):
        for suffix, name in PERCENTILES:
            v = rec.get(f"latency_{suffix}_ns")
            if v is not None and pd.notna(v):
                rows.append({**{k: rec[k] for k in SCENARIO_COLUMNS}, "label": rec["label"], "load": rec["load"],
                             "at_least": bool(rec["at_least"]), "percentile": name, "latency_us": float(v) / 1e3})
    return pd.DataFrame(rows, columns=cols)

#: ``best_worst_single``'s series, in the order its bars are drawn.
BEST_WORST_SERIES = ("best-of-N", "single run", "worst-of-N")


def best_worst_single(tp: pd.DataFrame) -> pd.DataFrame:
    """Best-of-N, single-run and worst-of-N throughput per scenario (see module doc); ``tp``:
    ``throughput_table``. Empty without a bestworst unit."""
    bw = tp[tp["method"] == "bestworst"]
    if bw.empty:
        return tp.iloc[0:0].assign(series=pd.Series(dtype=str))
    series = bw["goal"].str.extract(r"^(best|worst)(\d+)$")
    bw = bw.assign(series=series[0] + "-of-N")
    tolerances = set(bw["loss_tolerance"])
    single = tp[tp["method"].isin(["ndr", "pdr"]) & tp["loss_tolerance"].isin(tolerances)
                & tp["scenario_key"].isin(set(bw["scenario_key"]))].assign(series="single run")
    out = pd.concat([bw, single], ignore_index=True)
    out["series"] = pd.Categorical(out["series"], BEST_WORST_SERIES, ordered=True)
    mixes = out["frame_mix"] if "frame_mix" in out else [""] * len(out)
    out["_size"] = [framemix.sort_key(fs, mix) for fs, mix in zip(out["frame_size"], mixes)]
    return (out.sort_values(["dataplane", "variant", "_size", "series"], kind="stable").drop(columns="_size")
            .reset_index(drop=True))


#: ``goal_latency_table``'s percentile columns: latency, then IPDV (column suffix, key in the trial's map).
GOAL_LATENCY = (("latency", (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))),
                ("ipdv", (("p50", "p50"), ("p99", "p99"), ("max", "max"))))


def goal_latency_table(run: RunData) -> pd.DataFrame:
    """Latency at the goals an ndrpdr found, one row per unit x goal x fraction (see module doc)."""
    pct_cols = [f"{kind}_{suffix}_us" for kind, pcts in GOAL_LATENCY for suffix, _ in pcts]
    cols = ["unit", *SCENARIO_COLUMNS, "label", "repeat", "goal", "fraction", "load", "throughput_mpps", "at_least",
            "limited_by", "rate_mpps", "loss_ratio", *pct_cols, "trial_id"]
    trials = run.trials.set_index("trial_id") if not run.trials.empty else run.trials
    rows = []
    for s in run.searches:
        for g in s["result"].get("goals", []):
            for p in g.get("latency", []):
                if p["trial_id"] not in trials.index:
                    continue
                t = trials.loc[p["trial_id"]]
                row = {"unit": s["unit"], **{k: t[k] for k in SCENARIO_COLUMNS}, "label": s.get("label", s["method"]),
                       "repeat": int(s.get("repeat", 1)), "goal": g["name"], "fraction": p["fraction"],
                       "load": f"{p['fraction'] * 100:g}% of {g['name'].upper()}",
                       "throughput_mpps": g["lower_bound"] / 1e6, "at_least": bool(p["at_least"]),
                       "limited_by": g.get("limited_by", ""), "rate_mpps": p["offered_pps"] / 1e6,
                       "loss_ratio": p["loss_ratio"], "trial_id": p["trial_id"]}
                for kind, pcts in GOAL_LATENCY:
                    for suffix, key in pcts:
                        v = p[f"{kind}_ns"].get(key)
                        row[f"{kind}_{suffix}_us"] = v / 1e3 if v is not None else math.nan
                rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def disturbed_table(run: RunData) -> pd.DataFrame:
    """The trials host stalls disturbed (see module doc), in the order they ran."""
    cols = ["unit", *SCENARIO_COLUMNS, "label", "phase", "offered_mpps", "lost_packets", "dut_stall_us",
            "tester_stall_us", "steal_us", "retried", "disturbance"]
    t = run.trials
    if t.empty or not t["disturbed"].any():
        return pd.DataFrame(columns=cols)
    d = t[t["disturbed"]].copy()
    d["lost_packets"] = d["tx_packets"] - d["rx_packets"]
    d["steal_us"] = [sum(c.get("steal_us", 0.0) for c in json.loads(s).values()) if isinstance(s, str) else math.nan
                     for s in d.get("stalls", pd.Series(None, index=d.index))]
    for col in ("dut_stall_us", "tester_stall_us"):
        if col not in d:
            d[col] = math.nan
    return d[cols].reset_index(drop=True)

def search_path(run: RunData, repeats: Iterable[int] | None = (1,)) -> pd.DataFrame:
    """Every trial of the search units, in order (see module doc); ``repeats=None`` keeps all."""
    cols = ["unit", "scenario_key", "variant", "frame_size", "flows", "dut_cores", "label", "repeat", "step",
            "phase", "duration", "offered_mpps", "loss_ratio", "verdict", "in_result", "attempt", "lower_mpps",
            "upper_mpps"]
    t = run.trials
    units = [s for s in _units(run) if s["method"] != "maxrate" and s["result"].get("goals")]
    if t.empty or not units:
        return pd.DataFrame(columns=cols)
    wanted = set(repeats) if repeats is not None else None
    frames = []
    for s in units:
        if wanted is not None and int(s.get("repeat", 1)) not in wanted:
            continue
        goals = s["result"]["goals"]
        tolerances = sorted({g["loss_tolerance"] for g in goals})
        g0 = goals[0]
        ut = t[t["unit"] == s["unit"]].copy()
        ut["step"] = range(1, len(ut) + 1)
        ut["verdict"] = [_verdict(x, tolerances) if not retried else "disturbed, run again"
                         for x, retried in zip(judged_loss(ut), ut["retried"])]
        ut["lower_mpps"] = (g0.get("lower_bound") or math.nan) / 1e6
        ut["upper_mpps"] = (g0.get("upper_bound") or math.nan) / 1e6
        if "attempt" not in ut:
            ut["attempt"] = 1
        frames.append(ut)
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]

def _verdict(loss: float, tolerances: Sequence[float]) -> str:
    if loss <= 0:
        return "no loss"
    for tol in tolerances:
        if tol > 0 and loss <= tol:
            return f"loss <= {tol * 100:g}%"
    return "loss"
