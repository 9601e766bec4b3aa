"""DUT cores for X Gbit/s of Y-byte frames, from the DUT load model (``perfkit.analysis.cost``), and
the one capacity table a report shows.

``load_capacity(model, gbps, frame_sizes)`` -- per variant, frame size and Gbit/s target, the fewest
DUT cores c whose fixed share plus packets fit in ``utilization`` % of them:
``c x fixed_per_core + marginal(c) x packets/s <= c x utilization``. Columns: variant, frame_size,
gbps, mpps, marginal_ns, fixed_cores, cores_needed, predicted_cpu_pct (per core), extrapolated (the
frame size, the core count or the packets per core outside what was measured), assumption.

``capacity_answer(load, cpu_models, ...)`` -- the one capacity table a report shows: from the model
that holds up under cross-validation (the better one, of the load model and the CPU-share model of
``perfkit.analysis.models``), or none, with one line saying which and why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from perfkit import dataplanes
from perfkit.analysis.cost import LoadModel
from perfkit.analysis.models import WEAK_R2, CpuModels, capacity_tables
from perfkit.errors import ConfigError
from perfkit.units import L1_OVERHEAD

CAPACITY_COLUMNS = ["variant", "frame_size", "gbps", "mpps", "marginal_ns", "fixed_cores", "cores_needed",
                    "predicted_cpu_pct", "extrapolated", "assumption"]


def load_capacity(model: LoadModel | None, gbps_targets: Sequence[float], frame_sizes: Sequence[int],
                  utilization: float = 80.0, max_cores: int = 64) -> pd.DataFrame:
    """DUT cores needed per variant, frame size and Gbit/s target (module doc); empty without a
    second stage."""
    if not 0 < utilization <= 100:
        raise ConfigError("utilization", utilization, "a CPU per core percentage, 0 < x <= 100")
    if model is None or model.marginal is None:
        return pd.DataFrame(columns=CAPACITY_COLUMNS)
    scen = model.scenarios
    typical = {f: float(scen[f].mode().iloc[0]) for f in model.features if f in scen}
    fs_lo, fs_hi = scen["frame_size"].min(), scen["frame_size"].max()
    c_lo, c_hi = scen["dut_cores"].min(), scen["dut_cores"].max()
    per_core_max = scen["mpps_per_core_max"].max() * 1e6
    dp = dataplanes.get(str(scen["dataplane"].iloc[0]))
    int_variant = dp.variant if dp.variant in model.features else None   # calib's work_iterations
    assumption = ("marginal cost from the model at each core count" if "dut_cores" in model.marginal.features else
                  f"one core count measured ({c_lo:g}): the marginal cost taken as independent of the core count")
    held = {f: v for f, v in typical.items() if f in model.marginal.features and f not in ("frame_size", "dut_cores")
            and not f.startswith("variant_") and f != int_variant}
    if held:
        assumption += "; the other features at the scenarios' most common value: " + ", ".join(
            _feature_value(f, v) for f, v in held.items())
    cores = np.arange(1, max_cores + 1, dtype=float)
    rows = []
    for variant in sorted(scen["variant"].astype(str).unique(), key=_natural):
        for fs in frame_sizes:
            X = pd.DataFrame({**typical, "frame_size": float(fs), "dut_cores": cores})
            for f in model.features:
                if f.startswith("variant_"):
                    X[f] = float(f == f"variant_{variant}")
            if int_variant:
                X[int_variant] = float(variant)
            marginal = model.marginal.predict(X)
            fixed = model.fixed_per_core_ * cores
            for gbps in gbps_targets:
                pps = gbps * 1e9 / ((fs + L1_OVERHEAD) * 8)
                per_core = (fixed + marginal * 1e-9 * pps) / cores * 100
                ok = np.nonzero(per_core <= utilization)[0]
                i = ok[0] if len(ok) else None
                c = cores[i] if i is not None else math.nan
                rows.append({"variant": variant, "frame_size": fs, "gbps": gbps, "mpps": pps / 1e6,
                             "marginal_ns": float(marginal[i if i is not None else 0]),
                             "fixed_cores": float(fixed[i]) if i is not None else math.nan,
                             "cores_needed": int(c) if i is not None else math.nan,
                             "predicted_cpu_pct": float(per_core[i]) if i is not None else math.nan,
                             "extrapolated": bool(i is None or not fs_lo <= fs <= fs_hi or not c_lo <= c <= c_hi
                                                  or pps / c > per_core_max * 1.05),
                             "assumption": assumption})
    return pd.DataFrame(rows, columns=CAPACITY_COLUMNS)


def _feature_value(feature: str, value: float) -> str:
    """A feature's value as the scenario said it (``log_flows`` 3 -> ``flows 1000``)."""
    if feature == "log_flows":
        return f"flows {10 ** value:.0f}"
    if feature.startswith("log_"):
        return f"{feature[4:]} {10 ** value - 1:.0f}"
    return f"{feature} {value:g}"


def _natural(v: str) -> tuple[float, str]:
    """Sort numeric variants (calib's work iterations) as numbers."""
    try:
        return float(v), v
    except ValueError:
        return math.inf, v


@dataclass
class CapacityAnswer:
    """The one capacity table of a report, and why it is that one (or why there is none)."""

    table: pd.DataFrame
    """``load_capacity`` or ``models.capacity_tables`` columns; empty when no model holds up."""
    source: str
    """``DUT load model``, ``CPU-share model`` or empty."""
    reason: str
    """One line: which model, its cross-validated R², and what the other had."""


def capacity_answer(load: LoadModel | None, cpu_models: Sequence[CpuModels], gbps_targets: Sequence[float],
                    frame_sizes: Sequence[int], utilization: float = 80.0, max_cores: int = 64) -> CapacityAnswer:
    """The capacity table of the model with the higher cross-validated R², if it is at least
    ``WEAK_R2`` (the CPU-share model counts with its weakest variant); none otherwise."""
    mv = [m.multivariate for m in cpu_models if m.multivariate is not None]
    candidates = []
    if load is not None and load.marginal is not None:
        candidates.append(("DUT load model", load.cv_r2_, lambda: load_capacity(load, gbps_targets, frame_sizes,
                                                                               utilization, max_cores)))
    if mv:
        cvs = [f.cv_r2_ for f in mv]                 # as good as its weakest variant; untested if one is
        candidates.append(("CPU-share model", math.nan if any(math.isnan(c) for c in cvs) else min(cvs),
                           lambda: capacity_tables(cpu_models, gbps_targets, frame_sizes, utilization, max_cores)))
    said = "; ".join(f"{name} {'untested' if math.isnan(cv) else f'{cv:.2f}'}" for name, cv, _ in candidates)
    if load is not None and load.marginal is None:
        said = "; ".join(x for x in (said, "DUT load model: no second stage (too few resolved scenarios)") if x)
    good = sorted((c for c in candidates if c[1] >= WEAK_R2), key=lambda c: -c[1])
    if not good:
        why = (f"no model predicts the CPU of a scenario left out well enough (cross-validated R²: {said}; at "
               f"least {WEAK_R2:g} needed)" if candidates else
               f"no model ({said})" if said else "no model (too few trials with CPU figures)")
        return CapacityAnswer(pd.DataFrame(columns=CAPACITY_COLUMNS), "",
                              f"No table of DUT cores for X Gbit/s: {why}; any core count would be a guess.")
    name, cv, table = good[0]
    return CapacityAnswer(table(), name, f"From the {name} (cross-validated R²: {said}; the higher counts).")
