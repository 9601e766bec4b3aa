"""What each knob did: the effect of changing one knob, the rest of the scenario fixed, on the DUT's
cost per packet, throughput and loss, with a confidence interval from repeats.

A *knob* here is anything a run varied that is a setting rather than the workload: a system knob
(the trial's ``knobs``, ``perfkit.knobs``), a dataplane's build option (``Param.build``) and a
dataplane's on/off parameter (``Param.kind`` bool).

``knob_effects`` -- one row per knob x value x context x metric:
    knob          str    the knob's name
    value         str    the value compared
    baseline      str    the value it is compared with (the first the run used)
    context       str    the scenario key at the baseline value: what stayed fixed
    metric        str    ``dut_ns_per_packet`` [ns], ``rx_mpps`` [Mpps] or ``loss_ratio``
    n, n_baseline int    trials (repeats) at each value
    mean, baseline_mean  float  the metric's means
    change        float  mean - baseline_mean, in the metric's unit
    change_pct    float  change / baseline_mean [%]
    ci_low, ci_high float  the ``level`` confidence interval of ``change`` (Welch's t); NaN with
                         fewer than two trials on either side
    verdict       str    ``higher`` or ``lower`` when the interval excludes 0; ``no effect beyond the
                         noise`` when it holds 0; ``one trial each: no interval`` without repeats
    limited_by    str    what limited the compared max-rate figures, both sides (``dut``, ``testbed``,
                         ``host stalls`` ...; ``perfkit.analysis.throughput``): a received rate or
                         loss limited by anything but the DUT is the testbed's, not the dataplane's.
                         The DUT's cost per packet is its own CPU time whatever limited the rate.

``socket_delivery`` -- for traffic the dataplane passes to the DUT's kernel, per scenario: what a
socket there was delivered, and how many datagrams each packet it received carried (GRO).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from perfkit import dataplanes
from perfkit.analysis.run import RunData
from perfkit.analysis.throughput import throughput_table

#: The figures compared, with their units (the report's column titles).
METRICS = {"dut_ns_per_packet": "DUT ns per packet", "rx_mpps": "received Mpps", "loss_ratio": "loss ratio"}
AXES = ["dataplane", "variant", "frame_size", "flows", "dut_cores"]
NO_INTERVAL = "one trial each: no interval"
NO_EFFECT = "no effect beyond the noise"


def with_knob_columns(trials: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``trials`` with one column per knob (its name; system knobs from the ``knobs`` JSON, as text)
    and the names of every knob column, varied or not."""
    df = trials.copy()
    names: list[str] = []
    if "knobs" in df:
        parsed = df["knobs"].map(lambda v: json.loads(v) if isinstance(v, str) and v else (v or {}))
        for name in sorted({k for d in parsed for k in d}):
            df[name] = parsed.map(lambda d, n=name: str(d.get(n, "")))
            names.append(name)
    for dp_name in df["dataplane"].dropna().unique() if "dataplane" in df else []:
        for p in dataplanes.get(dp_name).params:
            if (p.build or p.kind is bool) and p.name in df and p.name not in names:
                df[p.name] = df[p.name].map(_text)
                names.append(p.name)
    return df, names


def varied_knobs(trials: pd.DataFrame) -> list[str]:
    """The knobs that took more than one value in ``trials``."""
    df, names = with_knob_columns(trials)
    return [n for n in names if df[n].nunique(dropna=False) > 1]


def knob_effects(run: RunData, method: str = "maxrate", level: float = 0.95) -> pd.DataFrame:
    """Per varied knob, the change each value made against the baseline value, scenario by scenario
    (see the module doc), from the run's ``method`` trials (one per repeat)."""
    trials = _counted(run.trials, method)
    if trials.empty:
        return pd.DataFrame()
    df, names = with_knob_columns(trials)
    limits = _unit_limits(run)
    rows: list[dict[str, Any]] = []
    for knob in [n for n in names if df[n].nunique() > 1]:
        for group, values in knob_contexts(df, knob, names):
            base = group[group[knob] == values[0]]
            for value in values[1:]:
                other = group[group[knob] == value]
                limited = ", ".join(sorted({limits.get(u, "") for u in pd.concat([base, other])["unit"]} - {""}))
                for metric in METRICS:
                    rows.append(_effect(knob, value, values[0], str(base["scenario_key"].iloc[0]), metric,
                                        other[metric], base[metric], level) | {"limited_by": limited})
    return pd.DataFrame(rows)


def _unit_limits(run: RunData) -> dict[str, str]:
    """Campaign unit -> what limited its max-rate figure (``throughput_table``)."""
    tp = throughput_table(run)
    if tp.empty or "unit" not in tp:
        return {}
    tp = tp[tp["goal"] == "max"]
    return dict(zip(tp["unit"], tp["limited_by"].fillna("")))


def knob_summary(effects: pd.DataFrame) -> pd.DataFrame:
    """One row per knob x value x metric: over its contexts, the median change [%], what limited the
    figures compared, and how many contexts each verdict had."""
    if effects.empty:
        return effects
    out = effects.groupby(["knob", "value", "baseline", "metric"], sort=False).agg(
        contexts=("context", "count"), median_change_pct=("change_pct", "median"),
        limited_by=("limited_by", lambda v: ", ".join(sorted({x for s in v for x in str(s).split(", ") if x}))),
        higher=("verdict", lambda v: int((v == "higher").sum())), lower=("verdict", lambda v: int((v == "lower").sum())),
        no_effect=("verdict", lambda v: int((v == NO_EFFECT).sum())),
        no_interval=("verdict", lambda v: int((v == NO_INTERVAL).sum())))
    return out.reset_index()


def perf_pairs(run: RunData, knob: str, perf_ids: set[str]) -> list[tuple[str, str, str, str]]:
    """For differential flame graphs: per context where both values have a profiled trial,
    ``(context, value, baseline trial_id, value trial_id)`` (the trial that received the most)."""
    df, names = with_knob_columns(run.trials[run.trials["trial_id"].isin(perf_ids)])
    if df.empty or knob not in names:
        return []
    out = []
    for group, values in knob_contexts(df, knob, names):
        best = group.sort_values("rx_pps", ascending=False).drop_duplicates(knob)
        by_value = dict(zip(best[knob], best["trial_id"]))
        ctx = str(best[best[knob] == values[0]]["scenario_key"].iloc[0])
        out += [(ctx, value, by_value[values[0]], by_value[value]) for value in values[1:]]
    return out


def knob_contexts(df: pd.DataFrame, knob: str, names: list[str]) -> list[tuple[pd.DataFrame, list[str]]]:
    """The groups of ``df`` that differ in ``knob`` alone, each with its values in run order (the
    first: the baseline); groups with one value are left out."""
    order = list(dict.fromkeys(df[knob]))
    others = list(dict.fromkeys(c for c in AXES + _param_columns(df) + names if c != knob and c in df))
    out = []
    for _, group in df.groupby(others, dropna=False, sort=False):
        present = set(group[knob])
        values = [v for v in order if v in present]
        if len(values) > 1:
            out.append((group, values))
    return out


def _effect(knob: str, value: str, baseline: str, context: str, metric: str, x: pd.Series, y: pd.Series,
            level: float) -> dict[str, Any]:
    x, y = x.dropna().astype(float), y.dropna().astype(float)
    mean, base = (float(x.mean()) if len(x) else np.nan), (float(y.mean()) if len(y) else np.nan)
    change = mean - base
    low = high = np.nan
    if len(x) >= 2 and len(y) >= 2:
        res = stats.ttest_ind(x, y, equal_var=False)
        ci = res.confidence_interval(level)
        low, high = float(ci.low), float(ci.high)
        if np.isnan(low):  # both sides without spread: the change is exact
            low = high = change
    if np.isnan(low):
        verdict = NO_INTERVAL
    elif low > 0:
        verdict = "higher"
    elif high < 0:
        verdict = "lower"
    else:
        verdict = NO_EFFECT
    return {"knob": knob, "value": value, "baseline": baseline, "context": context, "metric": metric,
            "n": len(x), "n_baseline": len(y), "mean": mean, "baseline_mean": base, "change": change,
            "change_pct": 100 * change / base if base else np.nan, "ci_low": low, "ci_high": high, "verdict": verdict}


def _param_columns(df: pd.DataFrame) -> list[str]:
    """Every dataplane parameter column of ``df``."""
    names: list[str] = []
    for dp_name in df["dataplane"].dropna().unique() if "dataplane" in df else []:
        names += [p.name for p in dataplanes.get(dp_name).params if p.name in df and p.name not in names]
    return names


def _text(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "on" if value else "off"
    return str(value)


def tables_held(run: RunData, method: str = "maxrate") -> pd.DataFrame:
    """What the DUT's tables held, per scenario (the trials' ``dut_tables``, read back after they
    were filled), with each of the DUT's drop counters per million packets offered in the scenario's
    ``method`` trials (``drops/M <counter>``: a table's missing entries show as the dataplane's
    lookup-miss counter, a DUT that could not keep up as ring overflows)."""
    trials = _counted(run.trials, method)
    if trials.empty or "dut_tables" not in trials:
        return pd.DataFrame()
    rows = []
    for key, group in trials.groupby("scenario_key", sort=False):
        held = _json(group["dut_tables"].iloc[0])
        if not held:
            continue
        drops: dict[str, int] = {}
        for v in group.get("dut_drops", []):
            for name, n in _json(v).items():
                drops[name] = drops.get(name, 0) + int(n)
        offered = float(group["tx_packets"].sum()) or 1.0
        rows.append({"scenario_key": key, **held, **{f"drops/M {n}": 1e6 * c / offered for n, c in sorted(drops.items())}})
    return pd.DataFrame(rows).fillna(0.0) if rows else pd.DataFrame()


def _counted(trials: pd.DataFrame, method: str) -> pd.DataFrame:
    """The trials of ``method`` whose figures count: in their unit's result, not a stalled trial
    that was run again."""
    if trials.empty or "method_name" not in trials:
        return pd.DataFrame()
    keep = trials["method_name"] == method
    if "in_result" in trials:
        keep &= trials["in_result"].astype(bool)
    if "retried" in trials:
        keep &= ~trials["retried"].astype(bool)
    return trials[keep]


def _json(value: Any) -> dict:
    return json.loads(value) if isinstance(value, str) and value else (value if isinstance(value, dict) else {})


def work_per_core(run: RunData, method: str = "maxrate") -> pd.DataFrame:
    """How the DUT's forwarded packets spread over its cores, per scenario with several DUT cores:
    each core's share [%] of the packets forwarded in the scenario's ``method`` trials (the trials'
    ``dut_packets_per_core``), and the busiest core's share."""
    trials = _counted(run.trials, method)
    if trials.empty or "dut_packets_per_core" not in trials:
        return pd.DataFrame()
    trials = trials[trials["dut_cores"] > 1]
    rows = []
    for key, group in trials.groupby("scenario_key", sort=False):
        total: dict[str, int] = {}
        for v in group["dut_packets_per_core"]:
            for core, n in _json(v).items():
                total[core] = total.get(core, 0) + int(n)
        packets = sum(total.values())
        if not packets:
            continue
        row: dict[str, Any] = {"scenario_key": key}
        row.update({f"core {c} %": 100 * n / packets for c, n in sorted(total.items(), key=lambda kv: int(kv[0]))})
        row["busiest core %"] = 100 * max(total.values()) / packets
        row["cores used"] = sum(1 for n in total.values() if n > 0.05 * packets)
        rows.append(row)
    return pd.DataFrame(rows)


def socket_delivery(run: RunData, method: str = "maxrate") -> pd.DataFrame:
    """What the DUT's kernel delivered to a socket, per scenario whose traffic the dataplane passes
    to it (the trials' ``socket_datagrams_per_skb``): medians over the ``method`` trials of the
    datagrams delivered [Mpps], the DUT's CPU time per datagram [ns] and the datagrams per packet
    the socket received (above 1: GRO aggregated them), with what limited the rate."""
    trials = _counted(run.trials, method)
    if trials.empty or "socket_datagrams_per_skb" not in trials:
        return pd.DataFrame()
    trials = trials[trials["socket_datagrams_per_skb"].notna()]
    if trials.empty:
        return pd.DataFrame()
    limits = _unit_limits(run)
    rows = []
    for key, group in trials.groupby("scenario_key", sort=False):
        rx_mpps = group["rx_packets"] / group["elapsed"].where(group["elapsed"] > 0) / 1e6
        rows.append({"scenario_key": key, "delivered Mpps": float(rx_mpps.median()),
                     "DUT ns per datagram": float(group["dut_ns_per_packet"].median()),
                     "datagrams per socket packet": float(group["socket_datagrams_per_skb"].median()),
                     "trials": len(group),
                     "limited_by": ", ".join(sorted({limits.get(u, "") for u in group.get("unit", [])} - {""}))})
    return pd.DataFrame(rows)
