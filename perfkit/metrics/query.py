"""Read back from Prometheus: the DUT's CPU over each trial's window, and the pushed trial figures.

Uses prometheus-api-client (``PrometheusConnect``) with the ``Endpoints`` (URL, basic auth, TLS).

``cpu_frame(trials, endpoints, dut_cpus=None)`` -- one row per trial x instance x cpu x mode
------------------------------------------------------------------------------------------------
For each trial window [start, end] it fetches the raw ``node_cpu_seconds_total`` samples around it
(``node_selector``, default ``job="node"``) and takes counter differences -- the quantity a pair of
``/proc/stat`` snapshots (``perfkit.host.cpustat``) gives, which node-exporter reads:

- ``method="inner"`` (default): between the first and the last sample *inside* [start, end]. The
  span is up to one scrape interval shorter at each end, but nothing from before or after the trial
  leaks in, so a steady load inside the window is measured without bias.
- ``method="interpolate"``: each counter interpolated linearly at exactly ``start`` and ``end``;
  the span is the whole window, but the scrape intervals that straddle its edges are averaged
  with what happened just outside it.

It first waits until Prometheus has a sample after ``end`` (a few scrape intervals at most). Windows shorter than
``MIN_SCRAPES`` (3) scrape intervals are refused (``ConfigError`` naming the trial and its length),
or skipped with a warning if ``on_short="skip"`` (as are trials without a valid window). A trial
for which Prometheus has no CPU samples (node-exporter was down) raises a ``MetricsError``, or with
``on_missing="skip"`` is left out and listed in the ``missing`` dict the caller passes (trial id ->
why); a Prometheus that cannot be reached at all always raises.

==========  =======  =====================================================================
column      dtype    meaning
==========  =======  =====================================================================
run_id      str      run of the trial
trial_id    str      the trial
instance    str      node-exporter target (``instance`` label)
cpu         int      logical CPU number
mode        str      user, nice, system, idle, iowait, irq, softirq, steal (``cpustat.MODES``)
seconds     float    CPU time in the mode over the span [s]
fraction    float    ``seconds`` / all modes' seconds of that cpu (the modes of a cpu sum to 1)
busy        bool     the mode counts as busy (all but idle and iowait)
dut         bool     the cpu is one of the trial's DUT cores
start, end  float    the window [unix s]
window_s    float    end - start [s]
span_start  float    first counter sample used [unix s] (= start with ``interpolate``)
span_end    float    last counter sample used [unix s] (= end with ``interpolate``)
span_s      float    span_end - span_start: the time the differences cover (<= window_s)
==========  =======  =====================================================================

``cpu_busy_frame(frame)`` sums it to one row per trial x instance x cpu: run_id, trial_id, instance,
cpu, ``busy`` (busy fraction 0..1), ``seconds`` (accounted CPU seconds), dut, start, end, window_s,
span_start, span_end, span_s.

DUT cores: ``dut_cpus`` given as a set of cpu numbers (all trials) or {trial_id: cpus}; by default
the keys of each trial's ``dut_cpu`` (the /proc/stat busy fractions the trial recorded).

``trial_metrics_frame(run_id, endpoints)`` -- one row per trial
----------------------------------------------------------------
The pushed ``perfkit_trial_*`` series of the run as Prometheus has them now (or at ``at``; with
``lookback``, the last sample of each series in that span, also of groups retired since). A run
retired from the Pushgateway (``perfkit.metrics.retire``) is read at its push times:
``pushed_trials_frame(run_id, endpoints, store.push_times())``, same columns. Columns:
``run_id``, ``trial_id``, the scenario labels (``series.SCENARIO_LABELS``: dataplane, variant,
scenario_key, frame_size int, flows int, dut_cores int, intended_pps float, duration float,
generator, method, git_sha), one column per parameter of the trial's dataplane (typed as the
dataplane's ``Param`` says; absent for other dataplanes' trials) and one float column per series as
named in ``perfkit.metrics.series`` (tx_packets, rx_packets, rx_pps, rx_bytes_per_second_l1, loss_ratio,
latency_p99_seconds, bpf_seconds_per_packet, start_time, end_time ...). A column is NaN for a trial
that did not push that series.
"""
from __future__ import annotations

import ast
import json
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from perfkit import dataplanes, stop
from perfkit.dataplane import Param
from perfkit.errors import ConfigError, MetricsError
from perfkit.host.cpustat import IDLE_MODES, MODE_ALIASES, MODES
from perfkit.metrics.config import Endpoints, describe_http_status, describe_request_error
from perfkit.metrics.series import LABEL_TYPES, PREFIX, SCENARIO_LABELS, TRIAL_LABELS, column_name
from perfkit.store import RunStore
from perfkit.trial import TrialResult

#: Windows must span at least this many scrape intervals.
MIN_SCRAPES = 3
CPU_METRIC = "node_cpu_seconds_total"
CPU_COLUMNS = ["run_id", "trial_id", "instance", "cpu", "mode", "seconds", "fraction", "busy", "dut",
               "start", "end", "window_s", "span_start", "span_end", "span_s"]
BUSY_COLUMNS = ["run_id", "trial_id", "instance", "cpu", "busy", "seconds", "dut", "start", "end", "window_s",
                "span_start", "span_end", "span_s"]


@dataclass(frozen=True)
class TrialWindow:
    """The time span of one trial, and which CPUs were the DUT's."""

    trial_id: str
    start: float
    """Unix time [s]."""
    end: float
    """Unix time [s]."""
    run_id: str = ""
    dut_cpus: frozenset[int] = field(default_factory=frozenset)

    @property
    def length(self) -> float:
        return self.end - self.start


# -- connecting ----------------------------------------------------------------------------------
def connect(endpoints: Endpoints) -> PrometheusConnect:
    """A ``PrometheusConnect`` with the endpoints' auth, TLS verification and timeout (few retries)."""
    session = requests.Session()
    session.verify = endpoints.verify_tls
    retry = Retry(total=1, backoff_factor=0.1, status_forcelist=(502, 503, 504), allowed_methods=None)
    try:
        return PrometheusConnect(url=endpoints.prometheus_url, auth=endpoints.auth, session=session,
                                 retry=retry, timeout=endpoints.timeout)
    except (TypeError, ValueError) as err:
        raise MetricsError(f"Prometheus {endpoints.prometheus_url}: {err}") from None


_STATUS_RE = re.compile(r"HTTP Status Code (\d+) \((.*)\)$", re.S)


def instant_query(pc: PrometheusConnect, promql: str, endpoints: Endpoints,
                  at: float | None = None) -> list[dict[str, Any]]:
    """Run one PromQL instant query; every failure becomes a ``MetricsError`` naming the URL."""
    params = {"time": repr(float(at))} if at is not None else None
    where = f"Prometheus {endpoints.prometheus_url}"
    try:
        return pc.custom_query(promql, params=params)
    except requests.RequestException as err:
        raise MetricsError(f"{where}: {describe_request_error(err, endpoints)}") from None
    except PrometheusApiClientException as err:
        m = _STATUS_RE.search(str(err))
        if m:
            body = m.group(2)
            try:   # b'...' from the library: show the server's JSON error text if there is one
                body = json.loads(ast.literal_eval(body).decode()).get("error", body)
            except Exception:  # noqa: BLE001 -- the raw text is good enough
                pass
            raise MetricsError(f"{where}: {describe_http_status(int(m.group(1)), str(body))} "
                               f"(query: {promql})") from None
        raise MetricsError(f"{where}: {err}") from None
    except (ValueError, KeyError) as err:   # an answer that is not the Prometheus API's JSON
        raise MetricsError(f"{where}: the answer is not Prometheus API JSON ({type(err).__name__}: {err}); "
                           "is this a Prometheus URL?") from None


# -- trial windows -------------------------------------------------------------------------------
def _cpus_of(value: Any) -> frozenset[int]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    return frozenset(int(c) for c in (value or {}))


def trial_windows(trials: Any, invalid: str = "raise") -> list[TrialWindow]:
    """Normalise ``trials``: TrialWindow(s), TrialResult(s), record dicts, a DataFrame or a RunStore.

    A trial without a proper window (end <= start, unset times) raises ``ConfigError``, or with
    ``invalid="skip"`` is left out with a warning.
    """
    if isinstance(trials, RunStore):
        trials = trials.results()
    elif isinstance(trials, pd.DataFrame):
        trials = trials.to_dict("records")
    elif isinstance(trials, (TrialWindow, TrialResult, Mapping)):
        trials = [trials]
    out: list[TrialWindow] = []
    for t in trials:
        if isinstance(t, TrialWindow):
            w = t
        elif isinstance(t, TrialResult):
            w = TrialWindow(t.trial_id, float(t.start_time), float(t.end_time), t.run_id, _cpus_of(t.dut_cpu))
        elif isinstance(t, Mapping):
            w = TrialWindow(str(t["trial_id"]), float(t.get("start_time", t.get("start", 0.0))),
                            float(t.get("end_time", t.get("end", 0.0))), str(t.get("run_id", "") or ""),
                            _cpus_of(t.get("dut_cpu", t.get("dut_cpus"))))
        else:
            raise ConfigError("trials", type(t).__name__,
                              "TrialWindow, TrialResult, a record dict, a DataFrame of records or a RunStore")
        if not (w.start > 0 and math.isfinite(w.end) and w.end > w.start):
            err = ConfigError(f"window of trial {w.trial_id}", f"{w.start}..{w.end}",
                              "start_time < end_time, both unix times [s]")
            if invalid != "skip":
                raise err
            warnings.warn(f"skipped: {err}", stacklevel=3)
            continue
        out.append(w)
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def check_window(w: TrialWindow, endpoints: Endpoints) -> None:
    """Refuse a window shorter than ``MIN_SCRAPES`` scrape intervals (``ConfigError``)."""
    minimum = MIN_SCRAPES * endpoints.scrape_interval
    if w.length < minimum:
        raise ConfigError(f"window of trial {w.trial_id}",
                          f"{w.length:.2f} s ({_iso(w.start)} .. {_iso(w.end)})",
                          f">= {minimum:g} s ({MIN_SCRAPES} scrape intervals of {endpoints.scrape_interval:g} s): "
                          "Prometheus cannot resolve CPU use over a shorter window; run the trial longer "
                          "or use the trial's own /proc/stat figures (perfkit.host.cpustat)")


# -- CPU -----------------------------------------------------------------------------------------
def _counter_delta(ts: np.ndarray, vs: np.ndarray, w: TrialWindow,
                   method: str) -> tuple[float, float, tuple[float, float] | None]:
    """(value at span start, value at span end, span) of one counter for the window ``w``."""
    if method == "interpolate":
        if len(ts) == 0 or w.start < ts[0] or w.end > ts[-1]:
            return 0.0, 0.0, None
        return float(np.interp(w.start, ts, vs)), float(np.interp(w.end, ts, vs)), (w.start, w.end)
    inside = (ts >= w.start) & (ts <= w.end)
    if inside.sum() < 2:
        return 0.0, 0.0, None
    i, j = np.flatnonzero(inside)[[0, -1]]
    return float(vs[i]), float(vs[j]), (float(ts[i]), float(ts[j]))


def _dut_for(w: TrialWindow, dut_cpus: Iterable[int] | Mapping[str, Iterable[int]] | None) -> frozenset[int]:
    if dut_cpus is None:
        return w.dut_cpus
    if isinstance(dut_cpus, Mapping):
        return frozenset(int(c) for c in dut_cpus.get(w.trial_id, w.dut_cpus))
    return frozenset(int(c) for c in dut_cpus)


def _cpu_series(pc: PrometheusConnect, w: TrialWindow, endpoints: Endpoints, wait: bool) -> list[dict[str, Any]]:
    interval = endpoints.scrape_interval
    pad = 2 * interval
    at = w.end + pad
    rng_ms = int(math.ceil((w.length + 2 * pad) * 1000))
    promql = f"{CPU_METRIC}{{{endpoints.node_selector}}}[{rng_ms}ms]"
    deadline = w.end + 6 * interval + endpoints.timeout
    if wait and time.time() < w.end + 1.2 * interval:
        time.sleep(w.end + 1.2 * interval - time.time())
    while True:
        series = instant_query(pc, promql, endpoints, at=at)
        covered = series and all(float(s["values"][-1][0]) >= w.end for s in series)
        if covered or not wait or time.time() > deadline:
            break
        stop.check()   # a stop pending (perfkit.stop) ends the wait
        time.sleep(interval / 2)
    if not series:
        raise NoSamples(f"Prometheus {endpoints.prometheus_url} has no {CPU_METRIC}{{{endpoints.node_selector}}} "
                           f"samples around trial {w.trial_id} ({_iso(w.start)} .. {_iso(w.end)}); is node-exporter "
                           "scraped with that selector (node_selector) and was it up then?")
    return series


class NoSamples(MetricsError):
    """Prometheus answers but has no (or too few) CPU samples for a trial's window."""


def cpu_frame(trials: Any, endpoints: Endpoints, dut_cpus: Iterable[int] | Mapping[str, Iterable[int]] | None = None,
              *, method: str = "inner", wait: bool = True, on_short: str = "raise", on_missing: str = "raise",
              missing: dict[str, str] | None = None) -> pd.DataFrame:
    """CPU time per trial x instance x cpu x mode over each trial's window (see module doc)."""
    if on_short not in ("raise", "skip"):
        raise ConfigError("on_short", on_short, ("raise", "skip"))
    if on_missing not in ("raise", "skip"):
        raise ConfigError("on_missing", on_missing, ("raise", "skip"))
    if method not in ("inner", "interpolate"):
        raise ConfigError("method", method, ("inner", "interpolate"))
    windows = trial_windows(trials, invalid=on_short)
    pc = connect(endpoints)
    rows: list[dict[str, Any]] = []
    try:
        for w in windows:
            try:
                check_window(w, endpoints)
            except ConfigError as err:
                if on_short == "raise":
                    raise
                warnings.warn(f"skipped: {err}", stacklevel=2)
                continue
            try:
                rows.extend(_window_rows(pc, w, endpoints, wait, method, _dut_for(w, dut_cpus)))
            except NoSamples as err:
                if on_missing == "raise":
                    raise
                if missing is not None:
                    missing[w.trial_id] = str(err)
    finally:
        pc.close()
    frame = pd.DataFrame(rows, columns=CPU_COLUMNS)
    return frame.astype({"cpu": int, "seconds": float, "fraction": float, "busy": bool, "dut": bool})


def _window_rows(pc: PrometheusConnect, w: TrialWindow, endpoints: Endpoints, wait: bool, method: str,
                 dut: frozenset[int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    per_cpu: dict[tuple[str, int], dict[str, float]] = {}
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for s in _cpu_series(pc, w, endpoints, wait):
        labels = s["metric"]
        ts = np.array([float(v[0]) for v in s["values"]])
        vs = np.array([float(v[1]) for v in s["values"]])
        key = (labels.get("instance", ""), int(labels["cpu"]))
        a, b, span = _counter_delta(ts, vs, w, method)
        if span is None:
            raise NoSamples(
                f"Prometheus {endpoints.prometheus_url}: {CPU_METRIC} of {key[0]} cpu {key[1]} has "
                f"samples only from {_iso(ts[0])} to {_iso(ts[-1])}, not enough inside trial "
                f"{w.trial_id} ({_iso(w.start)} .. {_iso(w.end)}); was node-exporter scraped during "
                "the whole trial?")
        mode = MODE_ALIASES.get(labels.get("mode", ""), labels.get("mode", ""))
        per_cpu.setdefault(key, {})[mode] = max(0.0, b - a)
        spans[key] = span
    short = {k: v[1] - v[0] for k, v in spans.items()
             if v[1] - v[0] < w.length - 2.5 * endpoints.scrape_interval}
    if short:
        (inst, cpu0), covered = next(iter(sorted(short.items())))
        warnings.warn(f"trial {w.trial_id}: {CPU_METRIC} samples of {inst} cpu {cpu0} cover only "
                      f"{covered:.1f} s of its {w.length:.1f} s window (missed scrapes, or Prometheus "
                      "started during the trial)", stacklevel=3)
    for (instance, cpu), modes in sorted(per_cpu.items()):
        total = sum(modes.values())
        order = [m for m in MODES if m in modes] + sorted(m for m in modes if m not in MODES)
        for mode in order:
            rows.append({"run_id": w.run_id, "trial_id": w.trial_id, "instance": instance, "cpu": cpu,
                         "mode": mode, "seconds": modes[mode],
                         "fraction": modes[mode] / total if total > 0 else math.nan,
                         "busy": mode not in IDLE_MODES, "dut": cpu in dut, "start": w.start,
                         "end": w.end, "window_s": w.length, "span_start": spans[(instance, cpu)][0],
                         "span_end": spans[(instance, cpu)][1],
                         "span_s": spans[(instance, cpu)][1] - spans[(instance, cpu)][0]})
    return rows


def cpu_busy_frame(cpu: pd.DataFrame) -> pd.DataFrame:
    """One row per trial x instance x cpu with its busy fraction, from a ``cpu_frame``."""
    if cpu.empty:
        return pd.DataFrame(columns=BUSY_COLUMNS)
    keys = ["run_id", "trial_id", "instance", "cpu"]
    g = cpu.groupby(keys, sort=False)
    out = g.agg(seconds=("seconds", "sum"), dut=("dut", "first"), start=("start", "first"),
                end=("end", "first"), window_s=("window_s", "first"), span_start=("span_start", "first"),
                span_end=("span_end", "first"), span_s=("span_s", "first")).reset_index()
    busy = cpu[cpu["busy"]].groupby(keys, sort=False)["seconds"].sum()
    out["busy"] = [busy.get(tuple(k), 0.0) / s if s > 0 else math.nan
                   for k, s in zip(out[keys].itertuples(index=False), out["seconds"])]
    return out[BUSY_COLUMNS]


# -- pushed trial metrics ------------------------------------------------------------------------
def _promql_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _params_of(dataplane: str) -> dict[str, Param]:
    """The scenario parameters (pushed as labels) of ``dataplane``; none for one perfkit lacks."""
    return {p.name: p for p in dataplanes.get(dataplane).params} if dataplane in dataplanes.names() else {}


def trial_metrics_frame(run_id: str, endpoints: Endpoints, *, trial_ids: Iterable[str] | None = None,
                        wait: float = 0.0, at: float | None = None, lookback: float | None = None) -> pd.DataFrame:
    """The pushed figures of a run's trials, one row per trial (columns in the module doc).

    ``trial_ids``: only these, and (with ``wait`` > 0 seconds) wait until Prometheus has scraped them
    all; a ``MetricsError`` lists those still missing then. ``at``: evaluate at that unix time (default
    now). ``lookback`` [s]: each series' last sample within ``lookback`` before ``at``
    (``last_over_time``), also of groups deleted from the Pushgateway since (a plain instant query
    sees those as stale).
    """
    if not run_id:
        raise ConfigError("run_id", run_id, "a run id")
    wanted = set(trial_ids) if trial_ids is not None else None
    selector = f'{{__name__=~"{PREFIX}.+", run_id={_promql_string(run_id)}}}'
    if lookback is not None:
        selector = f"last_over_time({selector}[{int(math.ceil(lookback * 1000))}ms])"
    pc = connect(endpoints)
    deadline = time.monotonic() + wait
    try:
        while True:
            series = instant_query(pc, selector, endpoints, at=at)
            found = {s["metric"].get("trial_id") for s in series}
            missing = (wanted - found) if wanted is not None else set()
            if not missing or time.monotonic() >= deadline:
                break
            stop.check()
            time.sleep(min(0.5, endpoints.scrape_interval))
    finally:
        pc.close()
    if missing and wait > 0:
        raise MetricsError(f"Prometheus {endpoints.prometheus_url}: trials {sorted(missing)} of run {run_id} "
                           f"not found after {wait:g} s; were they pushed (perfkit push --run {run_id}) and is "
                           "the Pushgateway scraped?")
    skip = {"__name__", "job", "instance", *TRIAL_LABELS}
    rows: dict[str, dict[str, Any]] = {}
    for s in series:
        m = s["metric"]
        tid = m.get("trial_id", "")
        if wanted is not None and tid not in wanted:
            continue
        row = rows.setdefault(tid, {"run_id": m.get("run_id", run_id), "trial_id": tid})
        for label in SCENARIO_LABELS:
            if label in m and label not in row:
                conv = LABEL_TYPES.get(label, str)
                row[label] = conv(m[label])
        params = _params_of(m.get("dataplane", ""))
        for name, param in params.items():
            if name in m and name not in row:
                row[name] = param.parse(m[name])
        extra = {k: v for k, v in m.items() if k not in skip and k not in params}
        row[column_name(m["__name__"], extra)] = float(s["value"][1])
    return _trial_frame(pd.DataFrame(list(rows.values())))


def _trial_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns in the documented order (labels, then series by name), trials by start time."""
    fixed = ["run_id", "trial_id", *SCENARIO_LABELS]
    if frame.empty:
        return pd.DataFrame(columns=fixed)
    for col in fixed:
        if col not in frame:
            frame[col] = None
    values = sorted(c for c in frame.columns if c not in fixed)
    frame = frame[fixed + values]
    if "start_time" in frame:
        frame = frame.sort_values(["start_time", "trial_id"], kind="stable")
    return frame.reset_index(drop=True)


#: ``pushed_trials_frame`` reads pushes back in windows of at most this span [s]: each query then
#: touches a few minutes of samples, whatever the length of the run.
PUSH_WINDOW = 300.0


def push_windows(times: Iterable[float], span: float = PUSH_WINDOW) -> list[tuple[float, float]]:
    """Sorted ``times`` cut into windows ``(first, last)`` of at most ``span`` seconds."""
    out: list[tuple[float, float]] = []
    for t in sorted(times):
        if out and t - out[-1][0] <= span:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def pushed_trials_frame(run_id: str, endpoints: Endpoints, push_times: Mapping[str, float]) -> pd.DataFrame:
    """A run's trials as Prometheus scraped them after their pushes (``trial_metrics_frame`` columns).

    ``push_times``: trial id -> unix time of its latest push (``RunStore.push_times``). Why not a
    query at now: once a run is retired from the Pushgateway (``perfkit.metrics.retire``) its series
    are stale, and an instant query at the run's end would miss trials whose groups were deleted
    before that time. So for each window of push times [a, b] (``push_windows``) this takes each
    series' last sample in [a - m, b + m] (``last_over_time``; m: a minute or 5 scrape intervals):
    every pushed group was scraped within it while it was on the Pushgateway. Then the groups on the
    Pushgateway now (pushed again from elsewhere). A trial found more than once keeps the values
    of the latest.
    """
    margin = max(60.0, 5 * endpoints.scrape_interval)
    frames = [trial_metrics_frame(run_id, endpoints, at=b + margin, lookback=b - a + 2 * margin)
              for a, b in push_windows(push_times.values())]
    frames.append(trial_metrics_frame(run_id, endpoints))
    frames = [f for f in frames if not f.empty]
    if not frames:
        return _trial_frame(pd.DataFrame())
    merged = pd.concat(frames, ignore_index=True).drop_duplicates("trial_id", keep="last")
    return _trial_frame(merged)


# -- health --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EndpointCheck:
    name: str
    url: str
    ok: bool
    detail: str


def check_endpoints(endpoints: Endpoints) -> list[EndpointCheck]:
    """Ask Prometheus and the Pushgateway whether they are ready (with the endpoints' auth and TLS)."""
    out = []
    for name, base in (("prometheus", endpoints.prometheus_url), ("pushgateway", endpoints.pushgateway_url)):
        url = base + "/-/ready"
        try:
            r = requests.get(url, auth=endpoints.auth, verify=endpoints.verify_tls, timeout=endpoints.timeout)
        except requests.RequestException as err:
            out.append(EndpointCheck(name, base, False, describe_request_error(err, endpoints)))
            continue
        ok = r.status_code == 200
        out.append(EndpointCheck(name, base, ok, "ready" if ok else describe_http_status(r.status_code, r.text)))
    return out
