"""The two sets of trials an explanation compares, chosen from stored runs: two scenarios of a run,
two values of a knob in a run, or one scenario in two runs.

A set holds, per campaign unit (one search of a scenario, one per repeat), its trials with perf
data at the highest rate the unit offered: a max-rate trial and the trials run again at its rate
after a host stall (``perfkit.search.trials``), or a search's trial at the maximum rate. These and
the units' repeats are the set's trials, whose spread gives the gap its noise. Trials without a
measured ``dut_ns_per_packet`` are left out.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from perfkit import dataplanes
from perfkit.analysis.knobs import knob_contexts, varied_knobs, with_knob_columns
from perfkit.analysis.run import RunData, variant_label
from perfkit.errors import ConfigError
from perfkit.explain.cost import TrialProfile
from perfkit.perf.store import perf_trial_ids, read_folded


@dataclass(frozen=True)
class TrialSet:
    """One side of a comparison."""

    label: str
    """How sentences name it: a scenario key, ``gro=on``, ``run <id>``."""
    profiles: tuple[TrialProfile, ...]
    """Its trials (repeats), each with its measured cost and perf profile."""
    scenario_key: str = ""
    """The scenario of its trials (the first one's, if several)."""
    run_id: str = ""


@dataclass(frozen=True)
class Pair:
    """Two sets to explain the difference of: ``b`` against ``a``."""

    a: TrialSet
    b: TrialSet
    context: str = field(default="")
    """What stayed the same (a knob's scenario), or empty."""


def profiled(run: RunData) -> pd.DataFrame:
    """The run's trials with perf data and a measured ``dut_ns_per_packet``: per campaign unit those
    at the highest rate it offered (``intended_pps``)."""
    ids = set(perf_trial_ids(run.store.path))
    df = run.trials
    if df.empty or not ids or "dut_ns_per_packet" not in df:
        return df.iloc[0:0]
    df = df[df["trial_id"].isin(ids) & (pd.to_numeric(df["dut_ns_per_packet"], errors="coerce") > 0)]
    top = df.groupby("unit")["intended_pps"].transform("max")
    return df[df["intended_pps"] >= top * (1 - 1e-9)]


def trial_set(run: RunData, trials: pd.DataFrame, label: str) -> TrialSet:
    """The set of ``trials`` (rows of ``profiled``), their stacks read from the run."""
    profiles = tuple(TrialProfile(str(r.trial_id), float(r.dut_ns_per_packet), read_folded(run.store.path, r.trial_id),
                                  _threads(getattr(r, "dut_kthread_cpu", None)), _speed(getattr(r, "dut_speed_ns_per_step", None)))
                     for r in trials.sort_values("trial_id").itertuples())
    keys = list(dict.fromkeys(trials["scenario_key"]))
    return TrialSet(label, profiles, keys[0] if keys else "", run.run_id)


def _speed(value: object) -> float | None:
    """A stored ``dut_speed_ns_per_step``, or None where it was not measured."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def _threads(kthread_cpu: object) -> tuple[str, ...]:
    """The DUT's packet threads' names from a stored ``dut_kthread_cpu`` (JSON text or a map)."""
    if isinstance(kthread_cpu, str) and kthread_cpu:
        kthread_cpu = json.loads(kthread_cpu)
    return tuple(sorted(kthread_cpu)) if isinstance(kthread_cpu, dict) else ()


def scenario_pair(run: RunData, a: str, b: str) -> Pair:
    """Scenario ``b`` of the run against its scenario ``a`` (scenario keys)."""
    df = profiled(run)
    keys = sorted(set(df["scenario_key"])) if len(df) else []
    for opt, key in (("--a", a), ("--b", b)):
        if key not in keys:
            raise ConfigError(opt, key, f"a scenario of run {run.run_id} with perf data: {', '.join(keys) or 'none'}")
    return Pair(trial_set(run, df[df["scenario_key"] == a], a), trial_set(run, df[df["scenario_key"] == b], b))


def knob_pairs(run: RunData, knob: str, a: str | None = None, b: str | None = None) -> list[Pair]:
    """Per scenario where the knob took both values (the rest the same), value ``b`` against ``a``
    (default: the run's first value against its second)."""
    df, names = with_knob_columns(profiled(run))
    varied = [n for n in names if df[n].nunique() > 1]
    if knob not in varied:
        raise ConfigError("--knob", knob, f"a knob run {run.run_id} varied, with perf data: {', '.join(varied) or 'none'}")
    values = list(dict.fromkeys(df[knob]))
    a = values[0] if a is None else a
    b = next((v for v in values if v != a), a) if b is None else b
    for opt, v in (("--a", a), ("--b", b)):
        if v not in values:
            raise ConfigError(opt, v, f"a value of {knob} in run {run.run_id}: {', '.join(values)}")
    pairs = []
    for group, _ in knob_contexts(df, knob, names):
        sides = [group[group[knob] == v] for v in (a, b)]
        if all(len(s) for s in sides):
            ctx = str(sides[0]["scenario_key"].iloc[0])
            pairs.append(Pair(trial_set(run, sides[0], f"{knob}={a}"), trial_set(run, sides[1], f"{knob}={b}"), ctx))
    if not pairs:
        raise ConfigError("--knob", knob, f"a knob with profiled trials at both {a} and {b}, the rest the same")
    return pairs


def run_pairs(run: RunData, baseline: RunData, scenario: str | None = None) -> list[Pair]:
    """Per scenario both runs have perf data of (or only ``scenario``), the run against the baseline."""
    mine, base = profiled(run), profiled(baseline)
    common = sorted(set(mine["scenario_key"]) & set(base["scenario_key"])) if len(mine) and len(base) else []
    if scenario is not None:
        if scenario not in common:
            raise ConfigError("--a", scenario, f"a scenario both runs have perf data of: {', '.join(common) or 'none'}")
        common = [scenario]
    if not common:
        raise ConfigError("--baseline", baseline.run_id, f"a run with perf data of a scenario of run {run.run_id}")
    return [Pair(trial_set(baseline, base[base["scenario_key"] == k], f"run {baseline.run_id}"),
                 trial_set(run, mine[mine["scenario_key"] == k], f"run {run.run_id}"), k) for k in common]


def variant_pairs(run: RunData) -> list[Pair]:
    """Per scenario where only the dataplane's variant differs (its main parameter, e.g. a direction),
    each other variant against the run's first one."""
    df, names = with_knob_columns(profiled(run))
    pairs: list[Pair] = []
    for dp_name in df["dataplane"].dropna().unique() if len(df) else []:
        param = dataplanes.get(dp_name).variant
        mine = df[df["dataplane"] == dp_name]
        if not param or mine["variant"].nunique() < 2:
            continue
        for group, values in knob_contexts(mine.drop(columns=[param], errors="ignore"), "variant", names):
            sides = {v: group[group["variant"] == v] for v in values}
            base = sides[values[0]]
            for v in values[1:]:
                pairs.append(Pair(trial_set(run, base, variant_label(dp_name, values[0])),
                                  trial_set(run, sides[v], variant_label(dp_name, v)),
                                  f"{base['scenario_key'].iloc[0]} vs {sides[v]['scenario_key'].iloc[0]}"))
    return pairs


def all_knob_pairs(run: RunData) -> list[Pair]:
    """``knob_pairs`` of every knob the run varied with perf data (each value against the first)."""
    df, _ = with_knob_columns(profiled(run))
    pairs: list[Pair] = []
    for knob in varied_knobs(profiled(run)) if len(df) else []:
        values = list(dict.fromkeys(df[knob]))
        for v in values[1:]:
            try:
                pairs += knob_pairs(run, knob, values[0], v)
            except ConfigError:   # no scenario with both values profiled
                continue
    return pairs
