"""Linear models of the DUT's CPU and what they say about capacity.

- per variant and DUT core count: ``LinearRegression`` of CPU per core vs frame size (seed 001);
- per variant, multivariate: the DUT's CPU work (``cpu_cores_pct``, % of one core summed over the
  DUT cores) vs frame size, 1/frame size, cores and offered Mpps (``FEATURES``), a model of costs:
  its intercept (a fixed share) and coefficients (per Mpps: a marginal cost) held >= 0;
- ``capacity_table``: the fewest cores whose predicted CPU per core stays under a utilisation, for
  X Gbit/s of Y-byte frames;
- ``drop_generator_limited``: the trials these models may use: not those the generator capped.

Every fit carries two R²: in-sample (``r2_``, how well it describes the rows it was fitted on) and
cross-validated (``cv_r2_``): each scenario (``scenario_key``) left out in turn
(``sklearn.model_selection.LeaveOneGroupOut``), the model fitted on the others predicts its rows,
and R² is taken over those predictions. Only the second says whether the model predicts a
scenario it has not seen, which is what a capacity table asks of it: a fit whose cross-validated
R² is below ``WEAK_R2`` (or that had too few scenarios to tell, ``MIN_CV_GROUPS``) is *weak*
(``LinearFit.weak``, ``r2_words``).

A fit of costs (``fit_linear(..., nonnegative=True)``: the DUT load model's marginal cost per
packet) holds its intercept and every coefficient at zero or above (``NonNegativeLinear``,
``scipy.optimize.lsq_linear``): a cost is not negative, and with features that are not negative
(frame size, log flows, core counts, a parameter switched on) neither is what it predicts. The
terms the bound held at zero, where an unconstrained fit would have gone below, are named
(``LinearFit.held_at_zero``, ``bound_words``).

Results are dataclasses (``LinearFit``, ``CpuModels``); fitted attributes end with ``_``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from perfkit.analysis.run import RunData, variant_label
from perfkit.errors import ConfigError
from perfkit.search.limits import fell_short
from perfkit.units import L1_OVERHEAD

#: A model whose cross-validated R² is below this is weak: it does not predict a scenario left out.
WEAK_R2 = 0.5
#: Fewest scenarios a model is cross-validated over (leave one out: at least two to fit on).
MIN_CV_GROUPS = 3
#: Features of the multivariate CPU model.
FEATURES = ("frame_size", "inv_frame_size", "dut_cores", "offered_mpps")
TARGET_UNITS = {"cpu_pct": "% of each DUT core", "cpu_cores_pct": "% of one core (summed over DUT cores)"}
FEATURE_UNITS = {"frame_size": "B", "inv_frame_size": "1/B", "dut_cores": "cores", "offered_mpps": "Mpps",
                 "rx_mpps": "Mpps"}


@dataclass
class LinearFit:
    """A fitted ``sklearn.linear_model.LinearRegression`` of a CPU target on some features."""

    name: str
    """``1 core``, ``multivariate`` ..."""
    group: dict[str, Any]
    """What the rows had in common (variant, dut_cores)."""
    target: str
    features: tuple[str, ...]
    """Features used (constant ones are dropped, see ``dropped``)."""
    intercept_: float
    coef_: dict[str, float]
    """Feature -> coefficient [target unit per feature unit]."""
    r2_: float
    """Coefficient of determination on the fitted rows (in-sample) [1]."""
    n_samples_: int
    residuals_: pd.DataFrame
    """trial_id (or scenario_key), frame_size, dut_cores, offered_mpps, actual, predicted, residual,
    cv_predicted (the prediction of the model fitted without the row's scenario; NaN when not
    cross-validated)."""
    dropped: tuple[str, ...] = ()
    """Features left out because they did not vary (e.g. one core count)."""
    collinear: tuple[str, ...] = ()
    """Features left out because they were a linear function of the intercept and the features
    before them on these rows (``frame_size`` and ``inv_frame_size`` over two frame sizes): their
    coefficients would not be determined by the data."""
    constants: dict[str, float] = field(default_factory=dict)
    """The value each dropped feature had [its unit]."""
    cv_r2_: float = math.nan
    """Cross-validated R² (module doc): of the predictions for each scenario by the model fitted
    without it [1]; NaN with fewer than ``MIN_CV_GROUPS`` scenarios."""
    cv_groups_: int = 0
    """Scenarios the rows came from: each is left out in turn when there are ``MIN_CV_GROUPS``."""
    weights: str = ""
    """The column the rows were weighted by (empty: unweighted); both R² are weighted alike."""
    held_at_zero: dict[str, float] = field(default_factory=dict)
    """Term (``intercept`` or a feature) -> what an unconstrained fit made of it [target unit per
    feature unit], for the terms of a non-negative fit that the bound held at 0 (module doc)."""

    @property
    def weak(self) -> bool:
        """The model does not hold up under cross-validation (``WEAK_R2``), or could not be tested."""
        return not self.cv_r2_ >= WEAK_R2

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.intercept_ + sum(self.coef_[f] * X[f].to_numpy(dtype=float) for f in self.features)

    def equation(self) -> str:
        terms = " ".join(f"{'+' if c >= 0 else '-'} {abs(c):.4g} x {f}" for f, c in self.coef_.items())
        return f"{self.target} = {self.intercept_:.4g} {terms}".strip()

    def r2_words(self) -> str:
        """Both R² and, for a weak model, the word (``r2_words``)."""
        return r2_words(self.r2_, self.cv_r2_, self.cv_groups_)

    def bound_words(self) -> str:
        """The terms held at 0 and what an unconstrained fit said, or empty (``held_at_zero``)."""
        if not self.held_at_zero:
            return ""
        said = ", ".join(f"{t} {c:.4g}" for t, c in self.held_at_zero.items())
        return (f"held at 0 (a cost is not negative): {', '.join(self.held_at_zero)}; an unconstrained fit "
                f"said {said}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "group": self.group, "target": self.target, "features": list(self.features),
                "intercept": self.intercept_, "coef": self.coef_, "r2": self.r2_, "cv_r2": _num(self.cv_r2_),
                "cv": f"leave one scenario out ({self.cv_groups_} scenarios)", "weak": self.weak,
                "n_samples": self.n_samples_, "weights": self.weights, "dropped": list(self.dropped),
                "equation": self.equation(), "held_at_zero": dict(self.held_at_zero),
                "collinear": list(self.collinear)}


class NonNegativeLinear:
    """Weighted least squares with an intercept, the intercept and every coefficient >= 0
    (``scipy.optimize.lsq_linear``); ``LinearRegression``'s ``fit``/``predict``/``intercept_``/``coef_``."""

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> NonNegativeLinear:
        from scipy.optimize import lsq_linear

        A = np.column_stack([np.ones(len(X)), X])
        sw = np.sqrt(sample_weight) if sample_weight is not None else np.ones(len(X))
        scale = np.abs(A).max(axis=0)
        scale[scale == 0] = 1.0                            # columns of one magnitude: a better-posed problem
        # BVLS, an exact active-set method for a problem this small; the default (TRF) warns of
        # "invalid value" on the rank-deficient training folds of a cross-validation
        z = lsq_linear(A * sw[:, None] / scale, y * sw, bounds=(0.0, np.inf), method="bvls").x
        z[z <= 1e-9 * max(np.abs(y).max(), 1e-300)] = 0.0     # at the bound: 0, not 1e-21 (a term held)
        x = z / scale
        self.intercept_, self.coef_ = float(x[0]), x[1:]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.intercept_ + X @ self.coef_


def _estimator(nonnegative: bool) -> Any:
    from sklearn.linear_model import LinearRegression

    return NonNegativeLinear() if nonnegative else LinearRegression()


def r2_words(r2: float, cv_r2: float, groups: int) -> str:
    """``R² 0.93 in-sample, 0.41 cross-validated (leave one of 8 scenarios out): weak ...``."""
    if math.isnan(cv_r2):
        return (f"R² {r2:.2f} in-sample, not cross-validated ({groups} scenario{'s' if groups != 1 else ''}; "
                f"at least {MIN_CV_GROUPS} needed): weak, untested on a scenario it was not fitted on")
    text = f"R² {r2:.2f} in-sample, {cv_r2:.2f} cross-validated (leave one of {groups} scenarios out)"
    if cv_r2 < WEAK_R2:
        text += f": weak, it predicts a scenario left out poorly (below {WEAK_R2:g})"
    return text


def _num(x: float) -> float | None:
    """A float for JSON: None for NaN."""
    return None if x is None or math.isnan(x) else float(x)

@dataclass
class CpuModels:
    """The CPU models of one variant."""

    variant: str
    label: str
    """How plots name the variant (``analysis.variant_label``)."""
    per_cores: list[LinearFit]
    """cpu vs frame size, one LinearRegression per DUT core count (seed 001's fit)."""
    multivariate: LinearFit | None
    """cpu vs frame size, 1/frame size, cores, offered Mpps (None: too few rows)."""
    correlations: pd.DataFrame
    """feature, pearson_r, spearman_rho, n."""
    notes: list[str] = field(default_factory=list)

    def fits(self) -> list[LinearFit]:
        return self.per_cores + ([self.multivariate] if self.multivariate else [])

def fit_linear(frame: pd.DataFrame, features: Sequence[str], target: str = "cpu_pct", name: str = "",
               group: dict[str, Any] | None = None, weights: str = "", groups: str = "scenario_key",
               exact: bool = False, nonnegative: bool = False) -> LinearFit | None:
    """LinearRegression of ``target`` on the non-constant ``features`` (rows weighted by the column
    ``weights`` if given), cross-validated leaving out one value of the column ``groups`` at a time
    (each row its own group without that column); None with fewer rows than features + 2 (one to
    spare: a fit with none has no residual to judge it by), or features + 1 if ``exact`` (for a
    prediction only, e.g. of a scenario a cross-validation left out). ``nonnegative``: a fit of
    costs, its intercept and coefficients held >= 0 (module doc)."""
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import r2_score

    data = frame.dropna(subset=[target, *features, *([weights] if weights else [])])
    used = [f for f in features if data[f].nunique() > 1]
    dropped = tuple(f for f in features if f not in used)
    if not used or len(data) < len(used) + (1 if exact else 2):
        return None
    used, collinear = independent(data, used)
    X = data[used].to_numpy(dtype=float)
    y = data[target].to_numpy(dtype=float)
    w = data[weights].to_numpy(dtype=float) if weights else None
    model = _estimator(nonnegative).fit(X, y, sample_weight=w)
    held: dict[str, float] = {}
    if nonnegative:
        free = LinearRegression().fit(X, y, sample_weight=w)
        for term, c, c_free in zip(["intercept", *used], [model.intercept_, *model.coef_],
                                   [free.intercept_, *free.coef_]):
            if c <= 1e-12 * max(1.0, abs(c_free)) and c_free < 0:
                held[term] = float(c_free)
    pred = model.predict(X)
    labels = data[groups].astype(str).to_numpy() if groups in data else np.arange(len(data)).astype(str)
    cv_pred = cross_validated(X, y, labels, w, nonnegative)
    n_groups = len(set(labels))
    res = data[[c for c in ("trial_id", "scenario_key", "variant", "frame_size", "dut_cores", "offered_mpps")
                if c in data]].copy()
    res["actual"] = y
    res["predicted"] = pred
    res["residual"] = y - pred
    res["cv_predicted"] = cv_pred
    return LinearFit(name=name, group=dict(group or {}), target=target, features=tuple(used),
                     intercept_=float(model.intercept_), coef_={f: float(c) for f, c in zip(used, model.coef_)},
                     r2_=float(r2_score(y, pred, sample_weight=w)), n_samples_=len(data),
                     residuals_=res.reset_index(drop=True), dropped=dropped,
                     constants={f: float(data[f].iloc[0]) for f in dropped if len(data)},
                     cv_r2_=float(r2_score(y, cv_pred, sample_weight=w)) if n_groups >= MIN_CV_GROUPS else math.nan,
                     cv_groups_=n_groups, weights=weights, held_at_zero=held, collinear=collinear)


def independent(data: pd.DataFrame, features: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """``features`` split into those that add a rank to the intercept and the ones kept before them,
    in order, and those that do not (``LinearFit.collinear``)."""
    kept: list[str] = []
    left: list[str] = []
    for f in features:
        A = np.column_stack([np.ones(len(data)), *(data[k].to_numpy(dtype=float) for k in [*kept, f])])
        A = A / np.abs(A).max(axis=0)       # columns of one magnitude: rank is judged, not the units
        (kept if np.linalg.matrix_rank(A) == len(kept) + 2 else left).append(f)
    return kept, tuple(left)


def cross_validated(X: np.ndarray, y: np.ndarray, groups: np.ndarray, weights: np.ndarray | None = None,
                    nonnegative: bool = False) -> np.ndarray:
    """Each row's prediction by a ``LinearRegression`` (``NonNegativeLinear`` if ``nonnegative``)
    fitted on the rows of the other groups (``LeaveOneGroupOut``); NaN everywhere with fewer than
    ``MIN_CV_GROUPS`` groups."""
    from sklearn.model_selection import LeaveOneGroupOut

    out = np.full(len(y), np.nan)
    if len(set(groups)) < MIN_CV_GROUPS:
        return out
    for train, test in LeaveOneGroupOut().split(X, y, groups):
        fold = _estimator(nonnegative).fit(X[train], y[train],
                                           sample_weight=None if weights is None else weights[train])
        out[test] = fold.predict(X[test])
    return out

def correlations(frame: pd.DataFrame, target: str = "cpu_cores_pct",
                 features: Sequence[str] = ("frame_size", "inv_frame_size", "dut_cores", "offered_mpps")) -> pd.DataFrame:
    rows = []
    for f in features:
        d = frame[[f, target]].dropna()
        ok = len(d) > 2 and d[f].nunique() > 1 and d[target].nunique() > 1
        rows.append({"feature": f, "pearson_r": d[f].corr(d[target]) if ok else math.nan,
                     "spearman_rho": d[f].corr(d[target], method="spearman") if ok else math.nan, "n": len(d)})
    return pd.DataFrame(rows, columns=["feature", "pearson_r", "spearman_rho", "n"])

def fit_cpu_models(frame: pd.DataFrame, multivariate_frame: pd.DataFrame | None = None, target: str = "cpu_pct",
                   features: Sequence[str] = FEATURES, multivariate_target: str = "cpu_cores_pct") -> list[CpuModels]:
    """Per variant: LinearRegression of ``target`` (CPU per core) vs frame size per core count (on
    ``frame``, e.g. the max-rate trials) and a multivariate model of ``multivariate_target`` (the
    DUT's CPU work) on ``features`` (on ``multivariate_frame``, default ``frame``)."""
    multi = frame if multivariate_frame is None else multivariate_frame
    out = []
    variants = sorted(set(frame["variant"]) | set(multi["variant"])) if not frame.empty or not multi.empty else []
    for variant in variants:
        f = frame[frame["variant"] == variant]
        m = multi[multi["variant"] == variant]
        label = variant_label(str((f if not f.empty else m)["dataplane"].iloc[0]), variant)
        notes = []
        per = []
        for cores, g in f.groupby("dut_cores"):
            fit = fit_linear(g, ("frame_size",), target, f"{cores} core" + ("s" if cores > 1 else ""),
                             {"variant": variant, "label": label, "dut_cores": int(cores)})
            if fit is None:
                notes.append(f"{variant}, {cores} cores: too few points or one frame size; no fit")
            else:
                per.append(fit)
        mv = fit_linear(m, features, multivariate_target, "multivariate", {"variant": variant, "label": label},
                        nonnegative=True)
        if mv is None:
            notes.append(f"{variant}: too few points for the multivariate model")
        else:
            if mv.dropped:
                notes.append(f"{variant}: {', '.join(mv.dropped)} did not vary; left out of the multivariate model")
            if mv.collinear:
                notes.append(f"{variant}: {', '.join(mv.collinear)} a linear function of the other features on "
                             f"these trials; left out of the multivariate model")
            if mv.held_at_zero:
                notes.append(f"{variant}, multivariate model: {mv.bound_words()}")
        out.append(CpuModels(variant, label, per, mv, correlations(m if not m.empty else f, multivariate_target), notes))
    return out

def coefficients_table(models: Sequence[CpuModels]) -> pd.DataFrame:
    """One row per fit x term: variant, model, target, term, coefficient, unit, held_at_zero (the bound
    of a fit of costs held it, ``LinearFit.held_at_zero``), r2 (in-sample), cv_r2 (cross-validated,
    module doc), weak, n."""
    rows = []
    cols = ["variant", "model", "target", "term", "coefficient", "unit", "held_at_zero", "r2", "cv_r2", "weak", "n"]
    for cm in models:
        for fit in cm.fits():
            unit = TARGET_UNITS.get(fit.target, fit.target)
            base = {"variant": cm.variant, "model": fit.name, "target": fit.target, "r2": fit.r2_,
                    "cv_r2": fit.cv_r2_, "weak": fit.weak, "n": fit.n_samples_}
            rows.append({**base, "term": "intercept", "coefficient": fit.intercept_, "unit": unit,
                         "held_at_zero": "intercept" in fit.held_at_zero})
            for f, c in fit.coef_.items():
                rows.append({**base, "term": f, "coefficient": c, "unit": f"{unit} per {FEATURE_UNITS.get(f, '1')}",
                             "held_at_zero": f in fit.held_at_zero})
    return pd.DataFrame(rows, columns=cols)

def correlation_table(models: Sequence[CpuModels]) -> pd.DataFrame:
    """The models' correlations, one row per variant x feature."""
    frames = [m.correlations.assign(variant=m.variant) for m in models]
    if not frames:
        return pd.DataFrame(columns=["variant", "feature", "pearson_r", "spearman_rho", "n"])
    return pd.concat(frames, ignore_index=True)[["variant", "feature", "pearson_r", "spearman_rho", "n"]]

def capacity_table(model: LinearFit, gbps_targets: Sequence[float], frame_sizes: Sequence[int],
                   utilization: float = 80.0, max_cores: int = 64) -> pd.DataFrame:
    """Cores needed for each Gbit/s target (L1, user-side frames) at each frame size, from a
    multivariate model of the DUT's CPU work (``cpu_cores_pct``: % of one core, summed over cores).

    For c cores the model predicts the work at (frame size, 1/frame size, c, offered Mpps); the CPU
    per core is that / c, and the smallest c whose CPU per core is <= ``utilization`` [%] is the
    answer. If the model saw one core count only (``dut_cores`` not a feature), the work is taken
    not to depend on the core count (perfect scaling). A model of CPU per core (``cpu_pct``) is
    evaluated as is. ``cores_needed`` is NaN when ``max_cores`` do not suffice; ``extrapolated`` is
    True when the rate or the frame size lies outside what the model was fitted on.
    Columns: variant, frame_size, gbps, mpps, cores_needed, predicted_cpu_pct (per core, at
    cores_needed), extrapolated, assumption.
    """
    if not 0 < utilization <= 100:
        raise ConfigError("utilization", utilization, "a CPU per core percentage, 0 < x <= 100")
    data = model.residuals_
    mpps_max = data["offered_mpps"].max() if "offered_mpps" in data else math.nan
    fs_lo, fs_hi = (data["frame_size"].min(), data["frame_size"].max()) if "frame_size" in data else (math.nan, math.nan)
    k = model.constants.get("dut_cores")
    assumption = ("cores from the model" if "dut_cores" in model.features else
                  f"one core count measured ({k:g}): CPU work taken as independent of the core count" if k else "")
    work = model.target != "cpu_pct"
    cores = np.arange(1, max_cores + 1)
    rows = []
    for fs in frame_sizes:
        for gbps in gbps_targets:
            mpps = gbps * 1e3 / ((fs + L1_OVERHEAD) * 8)
            X = pd.DataFrame({"frame_size": float(fs), "inv_frame_size": 1.0 / fs, "dut_cores": cores.astype(float),
                              "offered_mpps": mpps})
            per_core = model.predict(X) / (cores if work else 1)
            ok = np.nonzero(per_core <= utilization)[0]
            found = len(ok) > 0
            rows.append({"variant": model.group.get("variant"), "frame_size": fs, "gbps": gbps, "mpps": mpps,
                         "cores_needed": int(cores[ok[0]]) if found else math.nan,
                         "predicted_cpu_pct": float(per_core[ok[0]]) if found else math.nan,
                         "extrapolated": bool(mpps > mpps_max * 1.05 or not fs_lo <= fs <= fs_hi),
                         "assumption": assumption})
    return pd.DataFrame(rows, columns=["variant", "frame_size", "gbps", "mpps", "cores_needed",
                                       "predicted_cpu_pct", "extrapolated", "assumption"])

def capacity_tables(models: Sequence[CpuModels], gbps_targets: Sequence[float], frame_sizes: Sequence[int],
                    utilization: float = 80.0, max_cores: int = 64) -> pd.DataFrame:
    """``capacity_table`` of every variant's multivariate model, stacked."""
    frames = [capacity_table(m.multivariate, gbps_targets, frame_sizes, utilization, max_cores)
              for m in models if m.multivariate is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["variant", "frame_size", "gbps", "mpps", "cores_needed", "predicted_cpu_pct", "extrapolated",
                 "assumption"])

def capacity_pivot(cap: pd.DataFrame) -> pd.DataFrame:
    """Cores needed, rows frame size, columns (variant, Gbit/s); ``>N`` where N cores do not suffice,
    ``*`` marks extrapolations."""
    if cap.empty:
        return pd.DataFrame()
    d = cap.copy()
    d["cores"] = [("-" if pd.isna(c) else f"{int(c)}") + ("*" if x else "")
                  for c, x in zip(d["cores_needed"], d["extrapolated"])]
    d["target"] = d["gbps"].map(lambda g: f"{g:g} Gbit/s")
    out = d.pivot(index="frame_size", columns=["variant", "target"], values="cores")
    return out.reindex(columns=pd.MultiIndex.from_tuples(
        [(va, f"{g:g} Gbit/s") for va in dict.fromkeys(d["variant"]) for g in dict.fromkeys(d["gbps"])]))


# -- the trials the models use -----------------------------------------------------------------------
def drop_generator_limited(frame: pd.DataFrame, run: RunData) -> pd.DataFrame:
    """``frame`` (one row per trial, with ``trial_id``) without the trials whose generator offered
    clearly less than asked: their figures are the generator's, not the DUT's, and enter no model."""
    t = run.trials
    if frame.empty or t.empty:
        return frame
    seconds = t["elapsed"].where(t["elapsed"] > 0, t["duration"])
    short = fell_short(t["tx_packets"] / seconds, t["intended_pps"])
    return frame[~frame["trial_id"].isin(set(t.loc[short, "trial_id"]))].reset_index(drop=True)
