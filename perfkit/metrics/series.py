"""The series a trial is pushed as: names, labels, values, and the frame columns they are read back as.

``perfkit.metrics.push`` writes them (``build_registry``), ``perfkit.metrics.query`` reads them back
(``column_name``, ``LABEL_TYPES``), ``perfkit.metrics.retire`` finds the groups by them.

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

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge

from perfkit.trial import TrialResult
from perfkit.version import git_sha

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
