"""What a packet costs the DUT in CPU: the DUT load model (seed 003: CPU time per packet). The
cores it implies for X Gbit/s of Y-byte frames (seed 001) are ``perfkit.analysis.capacity``'s.

The model, in two stages (``fit_load``):

1. Per scenario, the load of the DUT's packet threads against the rate, over that scenario's
   trials at different rates::

       load_cores = fixed_cores + marginal_ns x 1e-9 x pps

   ``load_cores`` (``dut_busy x dut_cores``) is what is explained, ``pps`` (an input: what the
   program processed) what explains it. The marginal cost of a packet [ns] and the fixed share
   [cores] are the scenario's, fitted by least squares with both held at zero or above
   (``scipy.optimize.nnls``): no CPU does work in negative time. A scenario whose unconstrained
   line had a negative marginal cost (its load did not rise with the rate: noise, or rates that
   did not tell) is *not resolved*: its marginal cost is held at 0, a note names it, and it does
   not enter the second stage. A fixed share held at 0 is noted too.
2. Across the resolved scenarios, the marginal cost by frame size, variant, the dataplane's
   parameters, flows and DUT cores (``LoadModel.marginal``, a ``LinearFit`` weighted by how well
   each scenario's rates pin its marginal cost down, its intercept and coefficients held >= 0:
   ``models.NonNegativeLinear``; the features are not negative, nor is what it predicts), and the
   fixed share per DUT core (their weighted mean). A text variant's column is 1 for the variants
   other than the cheapest, whose cost is the intercept's.

Which packets: those the DUT's program processed, ``tx_packets`` less the frames its receive ring
turned away (``dut_drops[RING_DROP]``), over the trial's window (``end_time - start_time``, the
window ``dut_busy`` is taken over, give or take 1 %). The packet threads pay for those only: a
frame the full ring refused costs them nothing, so above the DUT's capacity the offered rate keeps
rising while the load does not, and a line in the offered rate would bend there.

Why no wake-ups: a packet thread that sleeps between packets pays each wake-up in CPU time (on the
2-vCPU VM 9-19 µs each), and it wakes less the busier it is. The wake-ups are an outcome of the
load, not an input: as a regressor they took part of the packets' cost away (a fit gave -6.7 µs per
wake-up and negative marginal costs). The model explains the load by inputs only; the wake-ups
(``wakeups_per_s``) explain what it leaves: ``LoadModel.wakeup_r_`` is the correlation of the
lines' residuals with them, which the page gives.

No trial is chosen by its load (a DUT that idles is part of the model, not an exception to it):
trials are left out only when the DUT shared a core with the tester (``shared_cores``) or lost
frames to host stalls (``disturbed``). No feature is computed from the load.

Two R² each (as ``perfkit.analysis.models``): in-sample, and cross-validated leaving one scenario out
at a time: the whole model (both stages, their bounds) is fitted without the scenario and predicts
its trials' load from its features and its rates. A model whose cross-validated R² is under
``WEAK_R2`` is weak. What the model implies in DUT cores is ``perfkit.analysis.capacity``.

Frames (tidy, one row per trial or per scenario):

``load_frame(run)`` -- one row per trial the model may use:
    trial_id, the scenario columns (``SCENARIO_COLUMNS``), the dataplane's parameters, method_name,
    window_s [s], pps [packets/s processed], mpps [Mpps], wakeups_per_s [1/s, NaN when not counted],
    dut_busy [0..1], load_cores [cores: core-seconds per second]

``LoadModel.scenarios`` -- one row per scenario with a line:
    scenario_key, the scenario columns, the parameters, the second stage's features (``features``),
    trials, mpps_min, mpps_max [Mpps], mpps_per_core_max [Mpps per DUT core],
    fixed_cores [cores], fixed_se [cores], marginal_ns [ns per packet], marginal_se [ns],
    marginal_weight, fixed_weight [1: relative, from the rates alone: 1 / diagonal of (XᵀX)⁻¹],
    fixed_free [cores], marginal_free_ns [ns]: the unconstrained line's, held_at_zero (``fixed``,
    ``marginal``, both or empty), resolved (False: marginal cost held at 0, not in the second stage),
    marginal_predicted [ns: the second stage's]

``LoadModel.trials`` -- ``load_frame`` plus fitted (each scenario its own line) and cv_predicted
(the model fitted without the trial's scenario) [cores]
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from perfkit import dataplanes
from perfkit.analysis.models import MIN_CV_GROUPS, WEAK_R2, LinearFit, fit_linear, r2_words
from perfkit.analysis.run import SCENARIO_COLUMNS, RunData
from perfkit.trial import RING_DROP

#: What the model explains: the DUT's packet threads' CPU [cores: core-seconds per second].
TARGET = "load_cores"
#: Fewest trials a scenario needs for a line of its own.
MIN_TRIALS = 3
#: A scenario whose processed rates spread less than this (standard deviation / mean) cannot tell
#: its fixed share from its marginal cost: it gets no line.
MIN_RATE_SPREAD = 0.02
FRAME_COLUMNS = ["trial_id", *SCENARIO_COLUMNS, "method_name", "window_s", "pps", "mpps", "wakeups_per_s",
                 "dut_busy", TARGET]



def _ring_drops(drops: Any) -> int:
    """Frames the DUT's receive ring turned away, from a trial's ``dut_drops`` (JSON or dict)."""
    d = json.loads(drops) if isinstance(drops, str) and drops else drops
    return int(d.get(RING_DROP, 0)) if isinstance(d, dict) else 0


def _params(frame: pd.DataFrame) -> list[str]:
    """The dataplane parameter columns ``frame`` has."""
    names = {p.name for dp in frame["dataplane"].unique() for p in dataplanes.get(str(dp)).params}
    return sorted(names & set(frame))


def load_frame(run: RunData) -> pd.DataFrame:
    """The trials the DUT load model may use (module doc)."""
    t = run.trials
    if t.empty or "dut_busy" not in t:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    busy = pd.to_numeric(t["dut_busy"], errors="coerce")
    window = pd.to_numeric(t["end_time"], errors="coerce") - pd.to_numeric(t["start_time"], errors="coerce")
    keep = busy.notna() & (window > 0) & (t["tx_packets"] > 0) & ~t["shared_cores"].astype(bool) & ~t["disturbed"]
    d = t[keep].copy()
    d["window_s"] = window[keep]
    # a list, not Series.map: on an empty arrow-string column map keeps the string dtype
    ring = np.array([_ring_drops(x) for x in d["dut_drops"]], dtype=float)
    d["pps"] = (d["tx_packets"] - ring) / d["window_s"]
    d["mpps"] = d["pps"] / 1e6
    wakeups = pd.to_numeric(d["dut_wakeups"], errors="coerce") if "dut_wakeups" in d else np.nan
    d["wakeups_per_s"] = wakeups / d["window_s"]
    d["dut_busy"] = busy[keep]
    d[TARGET] = d["dut_busy"] * d["dut_cores"]
    d = d[d["pps"] >= 0]
    cols = list(dict.fromkeys(FRAME_COLUMNS + (_params(d) if not d.empty else [])))
    return d[cols].reset_index(drop=True)


# -- the second stage's features -------------------------------------------------------------------
def _features(scen: pd.DataFrame) -> list[str]:
    """Add the second stage's feature columns to ``scen`` (one row per scenario); their names.

    frame_size [B], dut_cores, log_flows (log10 flows); per dataplane parameter: a boolean as 0/1; an
    integer as log10(1 + value) (table sizes: sessions, VIPs, reals: a lookup costs by the table's
    cache footprint, not its size), but as its value when it is the dataplane's variant (calib's
    work_iterations: the work per packet); a text variant as one 0/1 ``variant_<value>`` column per
    value but the cheapest (``_variants_by_cost``: the second stage's coefficients are >= 0)."""
    scen["log_flows"] = np.log10(scen["flows"].astype(float))
    names = ["frame_size", "dut_cores", "log_flows"]
    text_variant = False
    for dp_name in scen["dataplane"].unique():
        dp = dataplanes.get(str(dp_name))
        for p in dp.params:
            if p.name not in scen:
                continue
            values = pd.to_numeric(scen[p.name], errors="coerce")
            if p.name == dp.variant:
                if p.kind is int:
                    names.append(p.name)
                    scen[p.name] = values
                else:
                    text_variant = True
            elif p.kind is bool:
                scen[p.name] = scen[p.name].fillna(False).astype(bool).astype(float)
                names.append(p.name)
            elif p.kind is int:
                scen[f"log_{p.name}"] = np.log10(1.0 + values.fillna(0.0))
                names.append(f"log_{p.name}")
    if text_variant:
        for v in _variants_by_cost(scen)[1:]:
            scen[f"variant_{v}"] = (scen["variant"].astype(str) == v).astype(float)
            names.append(f"variant_{v}")
    return list(dict.fromkeys(names))


def _variants_by_cost(scen: pd.DataFrame) -> list[str]:
    """The text variants, cheapest first: by the weighted mean marginal cost of their resolved
    scenarios when ``scen`` has the first stage's columns, else by name."""
    names = sorted(scen["variant"].astype(str).unique())
    if "marginal_ns" not in scen:
        return names
    d = scen[scen["resolved"]] if scen["resolved"].any() else scen
    w = d["marginal_weight"] * d["marginal_ns"]
    mean = (w.groupby(d["variant"].astype(str)).sum() / d["marginal_weight"].groupby(d["variant"].astype(str)).sum())
    return sorted(names, key=lambda v: (mean.get(v, math.inf), v))


def _with_features(scen: pd.DataFrame, features: Sequence[str]) -> pd.DataFrame:
    """``scen`` with ``features`` (a variant's column says whether each scenario is that variant, also
    when the frame holds one variant only)."""
    _features(scen)
    for f in features:
        if f.startswith("variant_"):
            scen[f] = (scen["variant"].astype(str) == f[len("variant_"):]).astype(float)
        elif f not in scen:
            scen[f] = 0.0
    return scen


# -- the first stage: each scenario's line -----------------------------------------------------------
@dataclass
class Lines:
    """The first stage fitted on some trials."""

    scenarios: pd.DataFrame
    """One row per scenario (module doc, without the second stage's columns)."""
    fitted: np.ndarray
    """Each trial's load from its scenario's line [cores]."""


def _line(mpps: np.ndarray, load: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A scenario's (fixed share [cores], marginal cost [cores per Mpps]) by least squares with both
    >= 0 (``scipy.optimize.nnls``), and the unconstrained pair."""
    from scipy.optimize import nnls

    X = np.column_stack([np.ones(len(mpps)), mpps])
    free = np.linalg.lstsq(X, load, rcond=None)[0]
    return (free if (free >= 0).all() else nnls(X, load)[0]), free


def _lines(frame: pd.DataFrame) -> Lines:
    """Every scenario's fixed share and marginal cost, each >= 0 (module doc), on ``frame`` (trials of
    scenarios that each have a line); standard errors from the residuals pooled over the scenarios."""
    g = frame.groupby("scenario_key", sort=True)
    keys = list(g.groups)
    fits = {k: _line(d["mpps"].to_numpy(dtype=float), d[TARGET].to_numpy(dtype=float)) for k, d in g}
    coef = np.array([fits[k][0] for k in keys])
    free = np.array([fits[k][1] for k in keys])
    row = frame["scenario_key"].map({k: i for i, k in enumerate(keys)}).to_numpy()
    fitted = coef[row, 0] + coef[row, 1] * frame["mpps"].to_numpy(dtype=float)
    y = frame[TARGET].to_numpy(dtype=float)
    sigma2 = float(((y - fitted) ** 2).sum()) / max(len(frame) - 2 * len(keys), 1)
    inv = np.array([np.diag(np.linalg.pinv(np.array([[len(d), d["mpps"].sum()],     # the rates' say in each
                                                    [d["mpps"].sum(), (d["mpps"] ** 2).sum()]])))
                    for _, d in g])
    scen = g[[c for c in frame.columns if c in SCENARIO_COLUMNS[1:] or c in _params(frame)]].first()
    scen["trials"] = g.size()
    scen["mpps_min"], scen["mpps_max"] = g["mpps"].min(), g["mpps"].max()
    scen["mpps_per_core_max"] = scen["mpps_max"] / scen["dut_cores"]
    scen["fixed_cores"] = coef[:, 0]
    scen["fixed_se"] = np.sqrt(sigma2 * inv[:, 0])
    scen["marginal_ns"] = coef[:, 1] * 1e3                      # cores per Mpps = 1e3 ns per packet
    scen["marginal_se"] = np.sqrt(sigma2 * inv[:, 1]) * 1e3
    scen["marginal_weight"] = 1.0 / inv[:, 1]
    scen["fixed_weight"] = 1.0 / inv[:, 0]
    scen["fixed_free"] = free[:, 0]
    scen["marginal_free_ns"] = free[:, 1] * 1e3
    scen["held_at_zero"] = [", ".join(n for n, c in zip(("fixed", "marginal"), f) if c < 0) for f in free]
    scen["resolved"] = free[:, 1] >= 0
    return Lines(scen.reset_index(), fitted)


def _bound_notes(scen: pd.DataFrame) -> list[str]:
    """What the first stage's bounds did, in words (module doc)."""
    notes = []
    unresolved = scen[~scen["resolved"]]
    if len(unresolved):
        said = ", ".join(f"{k} ({m:.0f} ns)" for k, m in zip(unresolved["scenario_key"], unresolved["marginal_free_ns"]))
        notes.append(f"{len(unresolved)} scenario(s) not resolved: their load did not rise with the rate (an "
                     f"unconstrained line's marginal cost per packet was negative, which no CPU has): marginal cost "
                     f"held at 0, left out of the second stage: {said}")
    fixed = scen[scen["held_at_zero"].str.contains("fixed")]
    if len(fixed):
        said = ", ".join(f"{k} ({c:.3f} cores)" for k, c in zip(fixed["scenario_key"], fixed["fixed_free"]))
        notes.append(f"{len(fixed)} scenario(s) with a fixed share held at 0 (an unconstrained line's was negative): "
                     f"{said}")
    return notes


def _with_lines(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` without the scenarios that cannot have a line of their own, and why."""
    notes = []
    g = frame.groupby("scenario_key")["mpps"]
    spread = g.std() / g.mean()
    few = g.size()[g.size() < MIN_TRIALS].index
    flat = spread[(spread < MIN_RATE_SPREAD) | spread.isna()].index.difference(few)
    if len(few):
        notes.append(f"{len(few)} scenario(s) with fewer than {MIN_TRIALS} trials have no line: {', '.join(few)}")
    if len(flat):
        notes.append(f"{len(flat)} scenario(s) ran at one rate only (rates spread < {MIN_RATE_SPREAD:.0%}): their "
                     f"fixed share and marginal cost cannot be told apart: {', '.join(flat)}")
    return frame[~frame["scenario_key"].isin(set(few) | set(flat))], notes


# -- the second stage ------------------------------------------------------------------------------
@dataclass
class Stage2:
    """What the second stage says for a scenario it did not necessarily see."""

    marginal: LinearFit | None
    """marginal_ns on the features, >= 0 (None: too few scenarios; the weighted mean is used)."""
    marginal_mean_ns: float
    """Weighted mean marginal cost of the resolved scenarios [ns]."""
    fixed_per_core: float
    """Weighted mean fixed share per DUT core of the resolved scenarios [cores per core]."""

    def predict(self, scen: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Marginal cost [ns] and fixed share [cores] of each row of ``scen`` (its features)."""
        marginal = self.marginal.predict(scen) if self.marginal is not None else np.full(len(scen),
                                                                                         self.marginal_mean_ns)
        return marginal, self.fixed_per_core * scen["dut_cores"].to_numpy(dtype=float)


def _stage2(scen: pd.DataFrame, features: Sequence[str], exact: bool = False) -> Stage2:
    """The second stage on the resolved scenarios of ``scen`` (all of them if none is); ``exact``: fit
    it with no scenario to spare (to predict one left out)."""
    if scen["resolved"].any():
        scen = scen[scen["resolved"]]
    w = scen["marginal_weight"]
    per_core = scen["fixed_cores"] / scen["dut_cores"]
    fw = scen["fixed_weight"] * scen["dut_cores"] ** 2                 # var(fixed / c) = var(fixed) / c²
    fit = fit_linear(scen, features, "marginal_ns", "marginal cost", weights="marginal_weight", exact=exact,
                     nonnegative=True)
    return Stage2(fit, float((w * scen["marginal_ns"]).sum() / w.sum()), float((fw * per_core).sum() / fw.sum()))


def _load(stage: Stage2, scen: pd.DataFrame, trials: pd.DataFrame) -> np.ndarray:
    """The load [cores] the model predicts for ``trials`` of the scenarios in ``scen``."""
    marginal, fixed = stage.predict(scen)
    row = trials["scenario_key"].map({k: i for i, k in enumerate(scen["scenario_key"])}).to_numpy()
    return fixed[row] + marginal[row] * 1e-9 * trials["pps"].to_numpy(dtype=float)


# -- the model -------------------------------------------------------------------------------------
@dataclass
class LoadModel:
    """The DUT load model of a run (module doc). Fitted attributes end with ``_``."""

    scenarios: pd.DataFrame
    """One row per scenario with a line (module doc)."""
    trials: pd.DataFrame
    """The trials fitted, with ``fitted`` and ``cv_predicted`` (module doc)."""
    features: tuple[str, ...]
    """The second stage's features (those that vary are used: ``marginal.features``)."""
    marginal: LinearFit | None
    """The second stage: marginal_ns on the features, weighted, >= 0 (None: too few scenarios)."""
    fixed_per_core_: float
    """Fixed share of each DUT core [cores per core], weighted mean over the resolved scenarios."""
    r2_: float
    """R² of the trials' load, each scenario its own line (in-sample) [1]."""
    cv_r2_: float
    """R² of the trials' load predicted by the model fitted without their scenario [1]; NaN with
    fewer than ``MIN_CV_GROUPS`` scenarios."""
    cv_groups_: int
    """Scenarios with a line: each is left out in turn when there are ``MIN_CV_GROUPS``."""
    wakeup_r_: float = math.nan
    """Pearson r of the lines' residuals [cores] and the wake-ups per second: how much of what the
    inputs leave the wake-ups explain (module doc); NaN when not counted or constant [1]."""
    notes: list[str] = field(default_factory=list)

    @property
    def weak(self) -> bool:
        """It does not predict a scenario left out (cross-validated R² < ``WEAK_R2``, or untested)."""
        return not self.cv_r2_ >= WEAK_R2

    def r2_words(self) -> str:
        return r2_words(self.r2_, self.cv_r2_, self.cv_groups_)

    def equation(self) -> str:
        return "load_cores = fixed_cores + marginal_ns x packets/s"

    def summary(self) -> list[str]:
        """What a page says about the model, one line each."""
        lines = [f"DUT load model over {len(self.trials)} trials of {len(self.scenarios)} scenarios: "
                 f"`{self.equation()}`, both costs fitted >= 0; {self.r2_words()}",
                 "inputs only: the packets processed per second, and across scenarios frame size, variant, parameters, "
                 "flows and cores; the packet threads' wake-ups are an outcome of the load (a busier thread sleeps "
                 "less), not a regressor" + (f": they correlate with what the lines leave at r = {self.wakeup_r_:.2f}"
                                             if not math.isnan(self.wakeup_r_) else ""),
                 f"fixed share: {self.fixed_per_core_:.3f} of each DUT core (weighted mean)"]
        if self.marginal is not None:
            lines.append(f"marginal cost per packet: `{self.marginal.equation()}`, every term >= 0; "
                         f"{self.marginal.r2_words()}")
            if self.marginal.held_at_zero:
                lines.append(f"marginal cost per packet: {self.marginal.bound_words()}")
        else:
            lines.append("marginal cost per packet: too few scenarios to explain it by frame size, variant and "
                         "cores (their weighted mean is used)")
        return lines + self.notes

    def to_dict(self) -> dict[str, Any]:
        """For ``models.json``."""
        cols = ["scenario_key", "trials", "mpps_min", "mpps_max", "fixed_cores", "fixed_se", "marginal_ns",
                "marginal_se", "fixed_free", "marginal_free_ns", "held_at_zero", "resolved", "marginal_predicted"]
        return {"equation": self.equation(), "r2": self.r2_, "cv_r2": None if math.isnan(self.cv_r2_) else self.cv_r2_,
                "cv": f"leave one scenario out ({self.cv_groups_} scenarios)", "weak": self.weak,
                "n_trials": len(self.trials), "fixed_per_core": self.fixed_per_core_,
                "wakeup_r": None if math.isnan(self.wakeup_r_) else self.wakeup_r_,
                "marginal": self.marginal.to_dict() if self.marginal is not None else None,
                "scenarios": self.scenarios[[c for c in cols if c in self.scenarios]].to_dict("records"),
                "notes": list(self.notes)}


def fit_load(frame: pd.DataFrame) -> LoadModel | None:
    """Both stages on ``load_frame``'s trials, and their cross-validation (module doc); None when no
    scenario has a line of its own."""
    if frame.empty:
        return None
    frame, notes = _with_lines(frame)
    if frame.empty:
        return None
    lines = _lines(frame)
    scen = lines.scenarios
    notes += _bound_notes(scen)
    features = _features(scen)
    stage = _stage2(scen, features)
    scen["marginal_predicted"] = stage.predict(scen)[0]
    trials = frame.reset_index(drop=True).copy()
    trials["fitted"] = lines.fitted
    trials["cv_predicted"] = _cross_validated(trials, features)
    y = trials[TARGET].to_numpy(dtype=float)
    cv = _r2(y, trials["cv_predicted"].to_numpy()) if len(scen) >= MIN_CV_GROUPS else math.nan
    return LoadModel(scen, trials, tuple(features), stage.marginal, stage.fixed_per_core,
                     _r2(y, trials["fitted"].to_numpy()), cv, len(scen), _wakeup_r(trials), notes)


def _wakeup_r(trials: pd.DataFrame) -> float:
    """Pearson r of the lines' residuals and the wake-ups per second (``LoadModel.wakeup_r_``)."""
    d = pd.DataFrame({"residual": trials[TARGET] - trials["fitted"], "wakeups": trials["wakeups_per_s"]}).dropna()
    if len(d) < 3 or d["residual"].std() <= 1e-12 or d["wakeups"].nunique() < 2:
        return math.nan
    return float(d["residual"].corr(d["wakeups"]))


def _cross_validated(trials: pd.DataFrame, features: Sequence[str]) -> np.ndarray:
    """Each trial's load predicted by both stages fitted without its scenario (``LeaveOneGroupOut``
    over ``scenario_key``); NaN with fewer than ``MIN_CV_GROUPS`` scenarios."""
    from sklearn.model_selection import LeaveOneGroupOut

    out = np.full(len(trials), np.nan)
    keys = trials["scenario_key"].to_numpy()
    if len(set(keys)) < MIN_CV_GROUPS:
        return out
    for train, test in LeaveOneGroupOut().split(trials, groups=keys):
        lines = _lines(trials.iloc[train])
        stage = _stage2(_with_features(lines.scenarios, features), features, exact=True)
        held = trials.iloc[test]
        scen_held = _with_features(held.groupby("scenario_key", sort=True).first().reset_index(), features)
        out[test] = _load(stage, scen_held, held)
    return out


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    from sklearn.metrics import r2_score

    return float(r2_score(y, pred))
