"""Push one trial's figures to a Pushgateway, and backfill the trials of a run that were not pushed.

The order is always: the trial is written to the run store (``RunStore.append``) first, then pushed;
a push that fails never stops a campaign (``store_and_push`` reports it) and ``backfill(store,
endpoints)`` -- ``perfkit push --run RUN_ID`` -- pushes later every trial not in ``pushes.jsonl``.

Grouping key: ``job="perfkit"``, ``run_id``, ``trial_id``: each trial is its own group, so pushes
never overwrite each other, and pushing a trial again (PUT) replaces exactly that trial.

Series (all gauges, one value per trial; base units; every series carries ``TRIAL_LABELS``):

=================================================  ======================  ==================================
metric {extra labels}                              frame column            meaning
=================================================  ======================  ==================================
perfkit_trial_tx_packets / _rx_packets             tx_packets, rx_packets  offered / received packets
perfkit_trial_lost_packets                         lost_packets            tx - rx
perfkit_trial_intended_packets                     intended_packets        rate x duration asked for
perfkit_trial_tx_bytes / _rx_bytes                 tx_bytes, rx_bytes      bytes, FCS included
perfkit_trial_{tx,rx}_packets_per_second           tx_pps, rx_pps          packets / elapsed
perfkit_trial_intended_packets_per_second          intended_pps            the rate asked for
perfkit_trial_{tx,rx}_bytes_per_second {layer}     tx_bytes_per_second_l1, L1 (with preamble + IFG) and L2
                                                   _l2, rx_... likewise    byte rates (bytes, as the naming
                                                                           guide asks, never bits)
perfkit_trial_loss_ratio                           loss_ratio              (tx - rx) / tx
perfkit_trial_duration_seconds                     duration_seconds        intended duration
perfkit_trial_elapsed_seconds                      elapsed_seconds         measured sending time
perfkit_trial_{start,end}_timestamp_seconds        start_time, end_time    unix time of the trial window
perfkit_trial_latency_seconds {quantile}           latency_<p>_seconds     quantile 0 = min, 0.5, 0.9, 0.99,
                                                                           0.999, 1 = max (p: min p50 p90
                                                                           p99 p999 max)
perfkit_trial_latency_mean_seconds                 latency_mean_seconds    mean one-way latency
perfkit_trial_ipdv_seconds {quantile}, _mean_...   ipdv_<p>_seconds        |IPDV| (RFC 5481) likewise
perfkit_trial_bpf_seconds_per_packet               bpf_seconds_per_packet  XDP program run time per packet
perfkit_trial_dut_seconds_per_packet               dut_seconds_per_packet  DUT packet threads' CPU time per packet
perfkit_trial_kernel_seconds_per_packet            kernel_seconds_per_     the kernel path: DUT minus program
                                                   packet
perfkit_trial_dut_busy_ratio                       dut_busy_ratio          DUT cores' share their packet threads ran
perfkit_trial_dut_capacity_packets_per_second      dut_capacity_packets_   packets/s at 100 % of the DUT cores
                                                   per_second
perfkit_trial_dut_stall_seconds                    dut_stall_seconds       longest time a DUT core could not work
perfkit_trial_dut_speed_seconds_per_step          dut_speed_seconds_per_  the DUT cores' speed: one step of the
                                                   step                    stall probe's speed probe
perfkit_trial_disturbed                            disturbed               1: host stalls explained the loss
perfkit_trial_{reordered,duplicate,mismatched}_    reordered_packets, ...  sequence / content checks
packets
perfkit_trial_dut_cpu_busy_ratio {cpu}             dut_cpu_busy_ratio_<c>  DUT CPU busy fraction (/proc/stat)
perfkit_trial_dut_kthread_busy_ratio {thread}      dut_kthread_busy_ratio  busy fraction of a DUT kthread
                                                   _<thread>
perfkit_trial_dut_dropped_packets {reason}         dut_dropped_packets     DUT drops per reason
                                                   _<reason>
=================================================  ======================  ==================================

``TRIAL_LABELS``: ``run_id``, ``trial_id`` (the grouping key), ``dataplane``, ``variant`` (the
dataplane's main categorical parameter), ``scenario_key``, ``frame_size``, ``flows``, ``dut_cores``,
``intended_pps`` (the offered load the trial asked for [packets/s]), ``duration`` (intended [s]),
``generator``, ``method`` (what asked for the trial: trial, ndr, maxrate ...), ``git_sha``
(perfkit's ``git rev-parse --short HEAD``, from the run's metadata when it has one, else now;
``unknown`` outside a git checkout). Besides these, one label per scenario parameter of the
trial's dataplane (``Dataplane.params``, e.g. ``sessions``), ``query`` reads them back typed by the
dataplane. Numbers in labels are written exactly (``64``, ``1488095.2380952381``), booleans as
``true``/``false``. The Pushgateway adds ``job="perfkit"`` and
``instance=""``. Values that are unknown (no latency measured, no BPF stats) are not pushed.
"""
from __future__ import annotations

import base64
import logging
import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote_plus

import requests
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from perfkit.crashpoints import crashpoint
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics.config import Endpoints, describe_http_status, describe_request_error
from perfkit.store import RunStore
from perfkit.trial import TrialResult
from perfkit.version import git_sha

log = logging.getLogger(__name__)

JOB = "perfkit"
PREFIX = "perfkit_trial_"
GROUPING_LABELS: tuple[str, ...] = ("run_id", "trial_id")
#: Labels on every pushed series besides the grouping key.
SCENARIO_LABELS: tuple[str, ...] = ("dataplane", "variant", "scenario_key", "frame_size", "flows", "dut_cores",
                                    "intended_pps", "duration", "generator", "method", "git_sha")
TRIAL_LABELS: tuple[str, ...] = GROUPING_LABELS + SCENARIO_LABELS
#: How ``query.trial_metrics_frame`` converts label values back.
LABEL_TYPES: dict[str, Callable[[str], Any]] = {
    "frame_size": int, "flows": int, "dut_cores": int, "intended_pps": float, "duration": float,
}


@dataclass(frozen=True)
class MetricSpec:
    """One pushed series of a trial (a gauge; ``labels`` are its extra, fixed labels)."""

    name: str
    help: str
    column: str
    value: Callable[[TrialResult], float | None]
    labels: tuple[tuple[str, str], ...] = ()


def _tx_bytes_per_second_l2(r: TrialResult) -> float:
    return r.tx_bytes / r.elapsed if r.elapsed > 0 else 0.0


def _bytes(bits: float) -> float:
    return bits / 8


def _ns(v: float | None) -> float | None:
    return None if v is None else float(v) * 1e-9


#: The series with fixed labels; the labelled families (latency, ipdv, dut_*) are in ``_families``.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("perfkit_trial_tx_packets", "Packets offered (really sent) in the trial.", "tx_packets",
               lambda r: r.tx_packets),
    MetricSpec("perfkit_trial_rx_packets", "Packets received back in the trial.", "rx_packets",
               lambda r: r.rx_packets),
    MetricSpec("perfkit_trial_lost_packets", "Offered minus received packets.", "lost_packets",
               lambda r: r.lost_packets),
    MetricSpec("perfkit_trial_intended_packets", "Packets the trial asked for (rate x duration).",
               "intended_packets", lambda r: r.intended_packets),
    MetricSpec("perfkit_trial_tx_bytes", "Bytes offered, FCS included.", "tx_bytes", lambda r: r.tx_bytes),
    MetricSpec("perfkit_trial_rx_bytes", "Bytes received, FCS included.", "rx_bytes", lambda r: r.rx_bytes),
    MetricSpec("perfkit_trial_tx_packets_per_second", "Offered packet rate.", "tx_pps", lambda r: r.tx_pps),
    MetricSpec("perfkit_trial_rx_packets_per_second", "Received packet rate.", "rx_pps", lambda r: r.rx_pps),
    MetricSpec("perfkit_trial_intended_packets_per_second", "The packet rate the trial asked for.",
               "intended_pps", lambda r: r.intended_pps),
    MetricSpec("perfkit_trial_tx_bytes_per_second", "Offered byte rate (l1: with preamble and IFG; l2: frames).",
               "tx_bytes_per_second_l1", lambda r: _bytes(r.tx_bps_l1), (("layer", "l1"),)),
    MetricSpec("perfkit_trial_tx_bytes_per_second", "", "tx_bytes_per_second_l2", _tx_bytes_per_second_l2,
               (("layer", "l2"),)),
    MetricSpec("perfkit_trial_rx_bytes_per_second", "Received byte rate (l1: with preamble and IFG; l2: frames).",
               "rx_bytes_per_second_l1", lambda r: _bytes(r.rx_bps_l1), (("layer", "l1"),)),
    MetricSpec("perfkit_trial_rx_bytes_per_second", "", "rx_bytes_per_second_l2", lambda r: _bytes(r.rx_bps_l2),
               (("layer", "l2"),)),
    MetricSpec("perfkit_trial_loss_ratio", "(offered - received) / offered.", "loss_ratio",
               lambda r: r.loss_ratio),
    MetricSpec("perfkit_trial_duration_seconds", "Intended trial duration.", "duration_seconds",
               lambda r: r.duration),
    MetricSpec("perfkit_trial_elapsed_seconds", "Measured sending time.", "elapsed_seconds",
               lambda r: r.elapsed),
    MetricSpec("perfkit_trial_start_timestamp_seconds", "Unix time the traffic started.", "start_time",
               lambda r: r.start_time),
    MetricSpec("perfkit_trial_end_timestamp_seconds", "Unix time the trial ended.", "end_time",
               lambda r: r.end_time),
    MetricSpec("perfkit_trial_latency_mean_seconds", "Mean one-way latency.", "latency_mean_seconds",
               lambda r: _ns(r.latency_ns.get("mean"))),
    MetricSpec("perfkit_trial_ipdv_mean_seconds", "Mean |IPDV| (RFC 5481).", "ipdv_mean_seconds",
               lambda r: _ns(r.ipdv_ns.get("mean"))),
    MetricSpec("perfkit_trial_bpf_seconds_per_packet", "Mean run time of the DUT's XDP program per packet.",
               "bpf_seconds_per_packet", lambda r: _ns(r.bpf_ns_per_packet)),
    MetricSpec("perfkit_trial_dut_seconds_per_packet",
               "CPU time of the DUT's packet threads (NAPI, cpumap) per packet it processed.",
               "dut_seconds_per_packet", lambda r: _ns(r.dut_ns_per_packet)),
    MetricSpec("perfkit_trial_kernel_seconds_per_packet",
               "The DUT's per-packet CPU time outside its XDP program (NAPI, veth, redirect, wake-ups).",
               "kernel_seconds_per_packet", lambda r: _ns(r.kernel_ns_per_packet)),
    MetricSpec("perfkit_trial_dut_busy_ratio", "Share of the DUT cores' time its packet threads ran.",
               "dut_busy_ratio", lambda r: r.dut_busy),
    MetricSpec("perfkit_trial_dut_capacity_packets_per_second",
               "Packets per second the DUT cores could process at 100 % busy at the measured cost.",
               "dut_capacity_packets_per_second", lambda r: r.dut_capacity_pps),
    MetricSpec("perfkit_trial_dut_stall_seconds", "Longest time a DUT core could not process packets.",
               "dut_stall_seconds", lambda r: None if r.dut_stall_us is None else r.dut_stall_us * 1e-6),
    MetricSpec("perfkit_trial_dut_speed_seconds_per_step",
               "The DUT cores' speed: time of one step of the stall probe's speed probe (higher is slower).",
               "dut_speed_seconds_per_step", lambda r: _ns(r.dut_speed_ns_per_step)),
    MetricSpec("perfkit_trial_disturbed", "1 when measured host stalls explain the trial's loss.",
               "disturbed", lambda r: float(r.disturbed)),
    MetricSpec("perfkit_trial_reordered_packets", "Packets received out of order.", "reordered_packets",
               lambda r: r.reordered),
    MetricSpec("perfkit_trial_duplicate_packets", "Packets received more than once.", "duplicate_packets",
               lambda r: r.duplicates),
    MetricSpec("perfkit_trial_mismatched_packets", "Received packets that are not what the DUT should emit.",
               "mismatched_packets", lambda r: r.mismatched_packets),
)
#: Labelled families: metric -> (help, extra label, column prefix).
FAMILIES: dict[str, tuple[str, str, str]] = {
    "perfkit_trial_latency_seconds": ("One-way latency quantiles (0 = min, 1 = max).", "quantile", "latency"),
    "perfkit_trial_ipdv_seconds": ("|IPDV| quantiles (RFC 5481; 0 = min, 1 = max).", "quantile", "ipdv"),
    "perfkit_trial_dut_cpu_busy_ratio": ("Busy fraction of a DUT CPU (/proc/stat).", "cpu",
                                         "dut_cpu_busy_ratio"),
    "perfkit_trial_dut_kthread_busy_ratio": ("Busy fraction of a DUT kernel thread.", "thread",
                                             "dut_kthread_busy_ratio"),
    "perfkit_trial_dut_dropped_packets": ("Packets the DUT dropped, per reason.", "reason",
                                          "dut_dropped_packets"),
}


def percentile_to_quantile(key: str) -> str | None:
    """``p99.9`` -> ``0.999``, ``min`` -> ``0``, ``max`` -> ``1``; None for ``mean`` or unknown keys."""
    if key == "min":
        return "0"
    if key == "max":
        return "1"
    if key.startswith("p"):
        try:
            q = Decimal(key[1:]) / 100
        except InvalidOperation:
            return None
        return format(q.normalize(), "f") if 0 < q < 1 else None
    return None


def quantile_to_key(q: str) -> str:
    """``0.999`` -> ``p999`` (the store's column spelling), ``0`` -> ``min``, ``1`` -> ``max``."""
    v = Decimal(q)
    if v == 0:
        return "min"
    if v == 1:
        return "max"
    return "p" + format((v * 100).normalize(), "f").replace(".", "")


def column_name(metric: str, extra: Mapping[str, str]) -> str:
    """The ``trial_metrics_frame`` column of a series (see the module table)."""
    items = tuple(sorted(extra.items()))
    for spec in METRICS:
        if spec.name == metric and tuple(sorted(spec.labels)) == items:
            return spec.column
    if metric in FAMILIES and len(items) == 1:
        _, label, prefix = FAMILIES[metric]
        value = dict(items).get(label)
        if value is not None:
            if label == "quantile":
                return f"{prefix}_{quantile_to_key(value)}_seconds"
            return f"{prefix}_{value}"
    base = metric[len(PREFIX):] if metric.startswith(PREFIX) else metric
    return "_".join([base, *(v for _, v in items)])


def _fmt(v: Any) -> str:
    """A label value: integers without a dot, floats exactly (repr), bools lower case."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 2 ** 53 else repr(v)
    return str(v)


def trial_labels(result: TrialResult, sha: str | None = None) -> dict[str, str]:
    """The scenario labels of ``result``: ``SCENARIO_LABELS`` and its dataplane's parameters (the
    grouping key is not included)."""
    labels = {"dataplane": result.dataplane, "variant": result.variant, "scenario_key": result.scenario_key,
              "frame_size": _fmt(result.frame_size), "flows": _fmt(result.flows), "dut_cores": _fmt(result.dut_cores),
              "intended_pps": _fmt(float(result.intended_pps)), "duration": _fmt(float(result.duration)),
              "generator": result.generator, "method": result.method, "git_sha": sha or git_sha()}
    for name, value in sorted(result.params.items()):
        if name not in labels and name not in GROUPING_LABELS:
            labels[name] = _fmt(value)
    return labels


def _ok(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def build_registry(result: TrialResult, sha: str | None = None) -> CollectorRegistry:
    """A registry holding every series of one trial (what ``push_trial`` sends)."""
    reg = CollectorRegistry()
    labels = trial_labels(result, sha)
    gauges: dict[str, Gauge] = {}

    def gauge(name: str, help_: str, extra: Sequence[str]) -> Gauge:
        if name not in gauges:
            gauges[name] = Gauge(name, help_ or name, [*labels, *extra], registry=reg)
        return gauges[name]

    for spec in METRICS:
        v = spec.value(result)
        if _ok(v):
            help_ = next(s.help for s in METRICS if s.name == spec.name and s.help)
            gauge(spec.name, help_, [k for k, _ in spec.labels]).labels(**labels, **dict(spec.labels)).set(float(v))
    families: dict[str, dict[str, Any]] = {
        "perfkit_trial_latency_seconds": {percentile_to_quantile(k): _ns(v) for k, v in result.latency_ns.items()},
        "perfkit_trial_ipdv_seconds": {percentile_to_quantile(k): _ns(v) for k, v in result.ipdv_ns.items()},
        "perfkit_trial_dut_cpu_busy_ratio": dict(result.dut_cpu),
        "perfkit_trial_dut_kthread_busy_ratio": dict(result.dut_kthread_cpu),
        "perfkit_trial_dut_dropped_packets": dict(result.dut_drops),
    }
    for name, values in families.items():
        help_, label, _ = FAMILIES[name]
        for key, v in values.items():
            if key is not None and _ok(v):
                gauge(name, help_, [label]).labels(**labels, **{label: str(key)}).set(float(v))
    return reg


# -- pushing -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PushResult:
    """A trial that reached the Pushgateway."""

    run_id: str
    trial_id: str
    url: str
    """The group's URL (``<gateway>/metrics/job/perfkit/run_id/<run>/trial_id/<trial>``)."""
    series: int


def _escape_grouping_key(k: str, v: str) -> tuple[str, str]:
    """The Pushgateway's URL encoding of a grouping-key pair (base64 for '', '/' and ' ')."""
    if v == "":
        return k + "@base64", "="
    if "/" in v or " " in v:
        return k + "@base64", base64.urlsafe_b64encode(v.encode()).decode()
    return k, quote_plus(v)


def group_url(gateway: str, run_id: str, trial_id: str, job: str = JOB) -> str:
    parts = [f"{gateway.rstrip('/')}/metrics/job/{job}"]
    for k, v in (("run_id", run_id), ("trial_id", trial_id)):
        parts.extend(_escape_grouping_key(k, v))
    return "/".join(parts)


def _handler(endpoints: Endpoints) -> Callable[..., Callable[[], None]]:
    """A prometheus_client push handler that uses requests: basic auth, TLS verification, clear errors."""

    def handler(url: str, method: str, timeout: float | None, headers: Sequence[tuple[str, str]],
                data: bytes) -> Callable[[], None]:
        def handle() -> None:
            try:
                r = requests.request(method, url, data=data, headers=dict(headers), timeout=timeout,
                                     auth=endpoints.auth, verify=endpoints.verify_tls)
            except requests.RequestException as err:
                raise MetricsError(f"Pushgateway {endpoints.pushgateway_url}: "
                                   f"{describe_request_error(err, endpoints)}") from None
            if r.status_code >= 400:
                raise MetricsError(f"Pushgateway {endpoints.pushgateway_url}: "
                                   f"{describe_http_status(r.status_code, r.text)} ({method} {url})")
        return handle

    return handler


def push_trial(result: TrialResult, endpoints: Endpoints, store: RunStore | None = None, *,
               git_sha: str | None = None, job: str = JOB) -> PushResult:
    """Push one trial (replacing an earlier push of the same trial); mark it in ``store`` if given.

    Raises ``MetricsError`` naming the Pushgateway URL and the cause (connection refused, 401 ...).
    """
    if not result.run_id:
        raise ConfigError("run_id", result.run_id,
                          "the run the trial belongs to: write it with RunStore.append() before pushing")
    if not result.trial_id:
        raise ConfigError("trial_id", result.trial_id, "a trial id (uuid)")
    reg = build_registry(result, git_sha)
    series = sum(len(m.samples) for m in reg.collect())
    try:
        push_to_gateway(endpoints.pushgateway_url, job=job, registry=reg,
                        grouping_key={"run_id": result.run_id, "trial_id": result.trial_id},
                        timeout=endpoints.timeout, handler=_handler(endpoints))
    except MetricsError as err:
        raise MetricsError(f"push of trial {result.trial_id} (run {result.run_id}) failed: {err}") from None
    except ValueError as err:   # prometheus_client rejects the URL itself
        raise MetricsError(f"push of trial {result.trial_id} failed: Pushgateway URL "
                           f"{endpoints.pushgateway_url!r}: {err}") from None
    url = group_url(endpoints.pushgateway_url, result.run_id, result.trial_id, job)
    crashpoint("push.sent")
    if store is not None:
        store.mark_pushed(result.trial_id, url)
    return PushResult(result.run_id, result.trial_id, url, series)


@dataclass
class PushOutcome:
    """What ``store_and_push`` did with one trial."""

    path: Path
    """The trial's file in the run store (always written)."""
    pushed: PushResult | None = None
    error: str | None = None
    """Why the push failed (the trial is on disk; ``perfkit push --run`` backfills it)."""


def store_and_push(store: RunStore, result: TrialResult, endpoints: Endpoints | None,
                   extra: dict[str, Any] | None = None) -> PushOutcome:
    """Write the trial to disk (with ``extra`` bookkeeping columns), then push it.

    A failed push is reported in the outcome (and logged), never raised. With ``endpoints=None``
    nothing is pushed (the trial can be backfilled later).
    """
    path = store.append(result, extra=extra) if extra else store.append(result)
    out = PushOutcome(path)
    if endpoints is None:
        return out
    try:
        out.pushed = push_trial(result, endpoints, store, git_sha=run_git_sha(store))
    except MetricsError as err:
        out.error = (f"{err}; the trial is saved in {path} -- push it later with "
                     f"`perfkit push --run {store.run_id}`")
        log.warning("%s", out.error)
    return out


def run_git_sha(store: RunStore) -> str | None:
    """The perfkit git sha the run recorded in its metadata, if any."""
    meta = store.metadata()
    for key in ("perfkit_git_sha", "git_sha", "perfkit_sha"):
        v = meta.get(key)
        if isinstance(v, str) and v:
            return v
    perfkit = meta.get("perfkit")
    if isinstance(perfkit, dict) and isinstance(perfkit.get("git_sha"), str):
        return perfkit["git_sha"]
    return None


@dataclass
class BackfillResult:
    """What ``backfill`` pushed."""

    run_id: str
    url: str
    pushed: list[str] = field(default_factory=list)
    """Trial ids pushed now."""
    skipped: list[str] = field(default_factory=list)
    """Trial ids already pushed before (in pushes.jsonl) and still on the Pushgateway."""
    lost: list[str] = field(default_factory=list)
    """Trial ids recorded as pushed that the Pushgateway no longer has (it restarted and lost them,
    or was wiped) and Prometheus does not have either: pushed again, they are in ``pushed`` too."""
    retired: list[str] = field(default_factory=list)
    """Trial ids recorded as pushed that the Pushgateway no longer has but Prometheus does (retired
    from the Pushgateway, ``perfkit.metrics.retire``): not pushed again, they are in ``skipped``."""


def backfill(store: RunStore, endpoints: Endpoints, *, force: bool = False,
             trial_ids: Iterable[str] | None = None) -> BackfillResult:
    """Push every trial of the run not yet recorded in ``pushes.jsonl`` (all of them with ``force``).

    Stops at the first failure with a ``MetricsError`` saying how many were pushed before it (those
    are recorded, so running it again continues where it stopped).
    """
    done = set() if force else store.pushed_trial_ids()
    lost: set[str] = set()
    retired: set[str] = set()
    if done:
        present = gateway_trial_ids(endpoints, store.run_id)
        if present is not None:
            retired = _in_prometheus(store, endpoints, done - present)
            lost = done - present - retired
            done -= lost
    wanted = set(trial_ids) if trial_ids is not None else None
    out = BackfillResult(store.run_id, endpoints.pushgateway_url)
    results = [r for r in store.results() if wanted is None or r.trial_id in wanted]
    if wanted is not None:
        missing = wanted - {r.trial_id for r in results}
        if missing:
            raise ConfigError("trial_ids", sorted(missing), f"trials of run {store.run_id}")
    todo = [r for r in results if r.trial_id not in done]
    out.skipped = [r.trial_id for r in results if r.trial_id in done]
    out.lost = [r.trial_id for r in results if r.trial_id in lost]
    out.retired = [r.trial_id for r in results if r.trial_id in retired]
    sha = run_git_sha(store)
    for r in todo:
        r.run_id = r.run_id or store.run_id
        try:
            push_trial(r, endpoints, store, git_sha=sha)
        except MetricsError as err:
            raise MetricsError(f"backfill of run {store.run_id}: pushed {len(out.pushed)} of {len(todo)} "
                               f"trials, then {err}") from None
        out.pushed.append(r.trial_id)
    return out


def _in_prometheus(store: RunStore, endpoints: Endpoints, trial_ids: set[str]) -> set[str]:
    """Those of ``trial_ids`` Prometheus has, read at their push times (a retired trial is not lost);
    none when Prometheus cannot be asked (they are pushed again then: nothing is lost either)."""
    if not trial_ids:
        return set()
    from perfkit.metrics.query import pushed_trials_frame   # query imports this module

    times = {t: v for t, v in store.push_times().items() if t in trial_ids}
    try:
        frame = pushed_trials_frame(store.run_id, endpoints, times)
    except MetricsError:
        return set()
    return trial_ids & set(frame["trial_id"])


def gateway_groups(endpoints: Endpoints) -> list[dict[str, Any]]:
    """Every group the Pushgateway holds now, as its ``/api/v1/metrics`` lists them (``labels`` is
    the grouping key; one entry per metric family, ``push_time_seconds`` among them).

    Raises ``MetricsError`` naming the URL when the Pushgateway cannot be asked or answers nonsense.
    """
    url = endpoints.pushgateway_url.rstrip("/") + "/api/v1/metrics"
    where = f"Pushgateway {endpoints.pushgateway_url}"
    try:
        r = requests.get(url, auth=endpoints.auth, verify=endpoints.verify_tls, timeout=endpoints.timeout)
    except requests.RequestException as err:
        raise MetricsError(f"{where}: {describe_request_error(err, endpoints)}") from None
    if r.status_code != 200:
        raise MetricsError(f"{where}: {describe_http_status(r.status_code, r.text)} (GET {url})")
    try:
        groups = r.json()["data"]
    except (ValueError, KeyError, TypeError):
        groups = None
    if not isinstance(groups, list):
        raise MetricsError(f"{where}: GET {url} is not the Pushgateway API's JSON; is this a Pushgateway URL?")
    return [g for g in groups if isinstance(g, dict) and isinstance(g.get("labels"), dict)]


def gateway_trial_ids(endpoints: Endpoints, run_id: str, job: str = JOB) -> set[str] | None:
    """Trial ids of ``run_id`` the Pushgateway has now (its ``/api/v1/metrics``); None if it cannot tell."""
    try:
        groups = gateway_groups(endpoints)
    except MetricsError:
        return None
    out = set()
    for g in groups:
        labels = g["labels"]
        if labels.get("job") == job and labels.get("run_id") == run_id and labels.get("trial_id"):
            out.add(labels["trial_id"])
    return out
