"""Read the dataplane's own counters back from Prometheus (``perfkit exporter``'s series, job
``dataplane``) over a trial's window.

``counter_samples(endpoints, metric, start, end)`` fetches the raw samples of every series of
``metric`` from one scrape interval before ``start`` to the first sample at or after ``end`` (it
waits, a few scrape intervals at most, until Prometheus has that sample). From them:

- ``counter_rate_frame``: the counter's rate between consecutive samples -- a tidy frame, one row per
  series and sample: ``metric``, one column per label (``vip``, ``outcome`` ...), ``time`` (the later
  sample [unix s]), ``seconds`` (after ``start`` [s]), ``increase`` (over the interval) and ``rate``
  (per second: packets/s for ``*_packets_total``, bytes/s for ``*_bytes_total``);
- ``counter_increase``: per series, the increase from the last sample at or before ``start`` to the
  first at or after ``end``. A trial's traffic all falls between those two scrapes, so this is
  exactly what the dataplane counted during the trial (what Prometheus' ``increase()`` estimates by
  extrapolating inside the window).

Counter resets (the dataplane reloaded between two samples) count from zero, as in PromQL.
"""
from __future__ import annotations

import math
import time
from typing import Any, Mapping

import numpy as np
import pandas as pd

from perfkit import stop
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics.config import Endpoints
from perfkit.metrics.query import connect, instant_query

#: Labels of the scrape, not of the counter.
_SCRAPE_LABELS = ("__name__", "job", "instance")
RATE_COLUMNS = ["metric", "time", "seconds", "increase", "rate"]


def _check(metric: str, start: float, end: float) -> None:
    if not metric.replace("_", "").replace(":", "").isalnum() or not metric.endswith("_total"):
        raise ConfigError("metric", metric, "a counter's name (perfkit_..._total)")
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        raise ConfigError("window", (start, end), "start < end, unix times [s]")


def counter_samples(endpoints: Endpoints, metric: str, start: float, end: float, selector: str = "",
                    wait: bool = True) -> list[dict[str, Any]]:
    """Raw samples of every series of ``metric{selector}`` around [start, end] (the Prometheus API's
    matrix: ``metric`` labels and ``values``); waits for a sample at or after ``end``."""
    _check(metric, start, end)
    interval = endpoints.scrape_interval
    pad = 2 * interval
    at = end + pad
    rng_ms = int(math.ceil((end - start + 2 * pad) * 1000))
    promql = f"{metric}{{{selector}}}[{rng_ms}ms]"
    pc = connect(endpoints)
    deadline = time.time() + 6 * interval + endpoints.timeout
    while True:
        series = instant_query(pc, promql, endpoints, at=at)
        covered = series and all(float(s["values"][-1][0]) >= end for s in series)
        if covered or not wait or time.time() > deadline:
            break
        stop.check()
        time.sleep(interval / 2)
    if not series:
        raise MetricsError(f"Prometheus {endpoints.prometheus_url} has no {metric}{{{selector}}} samples around "
                           f"[{start:.3f}, {end:.3f}]; was `perfkit exporter` serving and scraped (job dataplane)?")
    return series


def _labels(s: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in s["metric"].items() if k not in _SCRAPE_LABELS}


def _arrays(s: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([[float(t), float(v)] for t, v in s["values"]])
    return values[:, 0], values[:, 1]


def _increases(vs: np.ndarray) -> np.ndarray:
    """Increase between consecutive samples; after a reset, the value counts from zero."""
    d = np.diff(vs)
    return np.where(d < 0, vs[1:], d)


def counter_rate_frame(endpoints: Endpoints, metric: str, start: float, end: float, selector: str = "",
                       wait: bool = True) -> pd.DataFrame:
    """The counter's rate between consecutive samples around the window (module doc)."""
    rows = []
    for s in counter_samples(endpoints, metric, start, end, selector, wait):
        ts, vs = _arrays(s)
        keep = (ts >= start - endpoints.scrape_interval) & (ts <= end + endpoints.scrape_interval)
        ts, vs = ts[keep], vs[keep]
        inc = _increases(vs)
        dt = np.diff(ts)
        for t, i, d in zip(ts[1:], inc, dt):
            rows.append({"metric": metric, **_labels(s), "time": float(t), "seconds": float(t) - start,
                         "increase": float(i), "rate": float(i / d) if d > 0 else math.nan})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=RATE_COLUMNS)
    labels = [c for c in frame.columns if c not in RATE_COLUMNS]
    return frame[["metric", *labels, "time", "seconds", "increase", "rate"]]


def counter_increase(endpoints: Endpoints, metric: str, start: float, end: float, selector: str = "",
                     wait: bool = True) -> pd.DataFrame:
    """Per series, the increase from the last sample at or before ``start`` to the first at or after
    ``end`` (module doc): columns ``metric``, the labels, ``increase``, ``from_time``, ``to_time``.
    A series with no sample at or before ``start`` (it appeared during the window) counts from 0."""
    rows = []
    for s in counter_samples(endpoints, metric, start, end, selector, wait):
        ts, vs = _arrays(s)
        after = np.flatnonzero(ts >= end)
        if not len(after):
            continue
        j = int(after[0])
        before = np.flatnonzero(ts <= start)
        i = int(before[-1]) if len(before) else -1
        if i >= 0:
            inc = float(_increases(vs[i:j + 1]).sum())
            frm = float(ts[i])
        else:
            inc = float(vs[0] + _increases(vs[:j + 1]).sum())
            frm = math.nan
        rows.append({"metric": metric, **_labels(s), "increase": inc, "from_time": frm, "to_time": float(ts[j])})
    return pd.DataFrame(rows)


def trial_counter_rates(endpoints: Endpoints, trial: Mapping[str, Any], counter: str = "packets_total",
                        wait: bool = False) -> pd.DataFrame:
    """``counter_rate_frame`` of the counter ``perfkit_<dataplane>_<counter>`` over one trial (a row of
    the trial frame: ``dataplane``, ``start_time``, ``end_time``); empty when Prometheus has none
    (a generator that runs no exporter, or the trial before this version)."""
    metric = f"perfkit_{trial['dataplane']}_{counter}"
    try:
        return counter_rate_frame(endpoints, metric, float(trial["start_time"]), float(trial["end_time"]), wait=wait)
    except MetricsError as err:
        if "has no" not in str(err):
            raise
        return pd.DataFrame(columns=RATE_COLUMNS)


def last_trial_counter_rates(metrics: Mapping[str, Any] | None,
                             trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series | None, str]:
    """For a report: ``trial_counter_rates`` of a run's last trial, from the Prometheus its outcome
    names (``RunOutcome.metrics``). Returns (rates, that trial, ""), or (empty, None, why there are
    none). A Prometheus that fails now costs only this figure: the run's figures are on disk."""
    url = (metrics or {}).get("prometheus_url")
    if not url or trials.empty:
        return pd.DataFrame(columns=RATE_COLUMNS), None, "Prometheus was not used, or no trial was measured"
    last = trials.sort_values("end_time").iloc[-1]
    try:
        return trial_counter_rates(Endpoints(prometheus_url=url), last), last, ""
    except MetricsError as err:
        return pd.DataFrame(columns=RATE_COLUMNS), None, str(err)
