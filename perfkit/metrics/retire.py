"""Retire old runs' trials from the Pushgateway once Prometheus has them.

Why: every trial is its own Pushgateway group (``perfkit.metrics.push``), and a Pushgateway keeps a
group until it is deleted. With thousands of groups every push and every 1 s scrape handles all of
them (pushes went from 0.2 to 0.9 s, the scrapes loaded the CPUs during trials). Prometheus keeps
what it scraped in its TSDB, so a group it has scraped is no longer needed on the Pushgateway.

``retire_runs(endpoints, keep)``:

1. lists the Pushgateway's groups (``GET /api/v1/metrics``) and takes perfkit's: grouping key
   exactly ``job="perfkit"``, ``run_id``, ``trial_id``; groups of ``keep`` runs, and of runs that
   pushed within ``min_age`` seconds (a run still going elsewhere), are left alone;
2. asks Prometheus (instant queries, now) for ``push_time_seconds`` and for the number of
   ``perfkit_trial_*`` series of every such group. A group counts as *scraped* only when Prometheus
   has its ``push_time_seconds`` with exactly the value the Pushgateway holds (so the scrape came
   after the group's latest push; a scrape is stored whole or not at all) *and* as many
   ``perfkit_trial_*`` series as the group holds. A group Prometheus does not see now -- it is
   down, does not scrape this Pushgateway, has not scraped since the push, or has the same trial
   from another push -- is never deleted;
3. deletes each scraped group (``DELETE /metrics/job/perfkit/run_id/<run>/trial_id/<trial>``, the
   URL ``push.group_url`` builds for pushes).

A campaign also retires its own trials as it goes (``retire_runs(..., only=[run_id])`` every
``campaign.metrics_session.RETIRE_EVERY`` pushes), so that the Pushgateway holds a few groups, not
the hundreds of a long run: every 1 s scrape and every push handle all the groups it holds, and
with hundreds of them the Pushgateway took a median 29 % of the DUT core in ``make run``.

Limits: the Pushgateway has no conditional delete; a trial of a retired run pushed again between
the listing and its delete (``perfkit push --run OLD --force`` at that very moment) would be
deleted before Prometheus scrapes it; the run store still has it. A retired run is read back from
Prometheus at its push times (``query.pushed_trials_frame``; ``perfkit metrics trials --run``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import requests

from perfkit.errors import MetricsError
from perfkit.metrics import query as _query
from perfkit.metrics.config import Endpoints, describe_http_status, describe_request_error
from perfkit.metrics.push import gateway_groups, group_url
from perfkit.metrics.series import GROUPING_LABELS, JOB, PREFIX

#: The Pushgateway's own series in every group (not pushed by perfkit).
_GATEWAY_SERIES = ("push_time_seconds", "push_failure_time_seconds")
_GROUP_KEYS = frozenset({"job", *GROUPING_LABELS})


@dataclass(frozen=True)
class Group:
    """One perfkit group on the Pushgateway."""

    run_id: str
    trial_id: str
    push_time: float | None
    """Its ``push_time_seconds`` (unix time of the latest successful push); None if it has none."""
    series: int
    """How many ``perfkit_trial_*`` series it holds."""


@dataclass
class RetireResult:
    """What ``retire_runs`` did; ``retired`` and ``left`` are ``{run_id: [trial_id, ...]}``."""

    pushgateway_url: str
    prometheus_url: str
    keep: list[str]
    groups: int = 0
    """perfkit groups on the Pushgateway before."""
    retired: dict[str, list[str]] = field(default_factory=dict)
    """Deleted: Prometheus has them."""
    kept: dict[str, list[str]] = field(default_factory=dict)
    """Left on purpose: runs in ``keep`` or pushed within ``min_age``."""
    unscraped: dict[str, list[str]] = field(default_factory=dict)
    """Left because Prometheus does not (yet) have them as the Pushgateway holds them."""

    def count(self, what: str) -> int:
        return sum(len(v) for v in getattr(self, what).values())

    def to_dict(self) -> dict[str, Any]:
        return {"pushgateway_url": self.pushgateway_url, "prometheus_url": self.prometheus_url,
                "keep": self.keep, "groups": self.groups, "retired": self.retired, "kept": self.kept,
                "unscraped": self.unscraped}

    def describe(self) -> str:
        """One line for people."""
        return (f"Pushgateway {self.pushgateway_url}: retired {self.count('retired')} trial group(s) of "
                f"{len(self.retired)} run(s) that Prometheus has; kept {self.count('kept')} of "
                f"{len(self.kept)} run(s) in use; left {self.count('unscraped')} Prometheus does not have yet")


def perfkit_groups(endpoints: Endpoints, job: str = JOB) -> list[Group]:
    """perfkit's groups on the Pushgateway (grouping key exactly job, run_id, trial_id)."""
    out = []
    for g in gateway_groups(endpoints):
        labels = g["labels"]
        if set(labels) != _GROUP_KEYS or labels.get("job") != job:
            continue
        out.append(Group(labels["run_id"], labels["trial_id"], _push_time(g), _series_count(g)))
    return out


def _push_time(group: Mapping[str, Any]) -> float | None:
    try:
        return float(group["push_time_seconds"]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _series_count(group: Mapping[str, Any]) -> int:
    return sum(len(fam.get("metrics") or []) for name, fam in group.items()
               if name.startswith(PREFIX) and isinstance(fam, dict))


def _job_of(labels: Mapping[str, str]) -> str | None:
    """The pushed job of a scraped series: ``job`` with ``honor_labels: true``, else ``exported_job``."""
    return labels.get("exported_job") or labels.get("job")


def prometheus_view(endpoints: Endpoints, job: str = JOB) -> dict[tuple[str, str], tuple[float, int]]:
    """What Prometheus has now of each perfkit group: ``(run_id, trial_id) -> (push_time, series)``.

    Instant queries at now: a group the Pushgateway still holds and Prometheus scrapes shows its
    latest scrape; one Prometheus no longer scrapes is stale (absent) -- so absent means "do not
    delete". Raises ``MetricsError`` when Prometheus cannot be asked.
    """
    pc = _query.connect(endpoints)
    try:
        times = _query.instant_query(pc, 'push_time_seconds{run_id!="", trial_id!=""}', endpoints)
        counts = _query.instant_query(
            pc, f'count by (job, exported_job, run_id, trial_id) ({{__name__=~"{PREFIX}.+", '
                'run_id!="", trial_id!=""})', endpoints)
    finally:
        pc.close()
    series = {_key(s["metric"]): int(float(s["value"][1])) for s in counts if _job_of(s["metric"]) == job}
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for s in times:
        key = _key(s["metric"])
        if _job_of(s["metric"]) != job:
            continue
        if key in out:          # the same group from two Pushgateways: not provably ours
            out[key] = (math.nan, 0)
            continue
        out[key] = (float(s["value"][1]), series.get(key, 0))
    return out


def _key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("run_id", ""), labels.get("trial_id", "")


def scraped(group: Group, view: Mapping[tuple[str, str], tuple[float, int]]) -> bool:
    """Prometheus has ``group`` as the Pushgateway holds it (its latest push, every series)."""
    seen = view.get((group.run_id, group.trial_id))
    return (seen is not None and group.push_time is not None and seen[0] == group.push_time
            and seen[1] == group.series)


def delete_group(session: requests.Session, endpoints: Endpoints, group: Group, job: str = JOB) -> None:
    """``DELETE`` one group (the Pushgateway answers 202 and deletes it right after)."""
    url = group_url(endpoints.pushgateway_url, group.run_id, group.trial_id, job)
    where = f"Pushgateway {endpoints.pushgateway_url}"
    try:
        r = session.delete(url, auth=endpoints.auth, verify=endpoints.verify_tls, timeout=endpoints.timeout)
    except requests.RequestException as err:
        raise MetricsError(f"{where}: {describe_request_error(err, endpoints)}") from None
    if r.status_code >= 400:
        raise MetricsError(f"{where}: {describe_http_status(r.status_code, r.text)} (DELETE {url})")


def _recent_runs(groups: Iterable[Group], min_age: float, now: float) -> set[str]:
    """Runs with a push younger than ``min_age`` seconds: probably still going."""
    return {g.run_id for g in groups if g.push_time is not None and now - g.push_time < min_age}


def retire_runs(endpoints: Endpoints, keep: Iterable[str] = (), *, min_age: float = 0.0,
                job: str = JOB, only: Iterable[str] | None = None) -> RetireResult:
    """Delete from the Pushgateway the groups of runs not in ``keep`` that Prometheus has (module doc).

    ``min_age`` [s]: also keep runs that pushed more recently than that. ``only``: retire the
    groups of these runs alone (a run retiring its own trials as it goes). Raises ``MetricsError``
    when the Pushgateway or Prometheus cannot be asked (nothing is deleted then), or a delete fails
    (saying how many were deleted before it).
    """
    keep_set = set(keep)
    only = set(only) if only is not None else None
    out = RetireResult(endpoints.pushgateway_url, endpoints.prometheus_url, sorted(keep_set))
    groups = perfkit_groups(endpoints, job)
    out.groups = len(groups)
    keep_set |= _recent_runs(groups, min_age, time.time()) if min_age > 0 else set()
    candidates = []
    for g in groups:
        if only is not None and g.run_id not in only:
            continue
        if g.run_id in keep_set:
            out.kept.setdefault(g.run_id, []).append(g.trial_id)
        else:
            candidates.append(g)
    if not candidates:
        return out
    view = prometheus_view(endpoints, job)
    with requests.Session() as session:
        for g in candidates:
            if not scraped(g, view):
                out.unscraped.setdefault(g.run_id, []).append(g.trial_id)
                continue
            try:
                delete_group(session, endpoints, g, job)
            except MetricsError as err:
                raise MetricsError(f"retiring old runs: deleted {out.count('retired')} trial group(s), then {err}"
                                   ) from None
            out.retired.setdefault(g.run_id, []).append(g.trial_id)
    return out
