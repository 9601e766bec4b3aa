"""Push one trial's figures to a Pushgateway, and backfill the trials of a run that were not pushed.

The order is always: the trial is written to the run store (``RunStore.append``) first, then pushed;
a push that fails never stops a campaign (``store_and_push`` reports it) and ``backfill(store,
endpoints)`` -- ``perfkit push --run RUN_ID`` -- pushes later every trial not in ``pushes.jsonl``.

The series and their labels are ``perfkit.metrics.series``.
"""
from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote_plus

import requests
from prometheus_client import push_to_gateway

from perfkit.crashpoints import crashpoint
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics.config import Endpoints, describe_http_status, describe_request_error
from perfkit.metrics.query import pushed_trials_frame
from perfkit.metrics.series import JOB, build_registry
from perfkit.store import RunStore
from perfkit.trial import TrialResult

log = logging.getLogger(__name__)


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
