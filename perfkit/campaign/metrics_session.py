"""The metrics side of a campaign: endpoints or the local stack, pushes that never stop the run.

``MetricsSession.open(spec, enabled)`` decides once, at the start, and says why in ``note``:

1. metrics off (``--no-metrics`` or ``metrics.enabled: false``): nothing is pushed;
2. endpoints configured (campaign ``metrics.config``/URLs, or ``$PERFKIT_METRICS_CONFIG``,
   ``$PERFKIT_PUSHGATEWAY_URL``, ``$PERFKIT_PROMETHEUS_URL``): they are used if they answer;
3. else, with ``start_local`` (the default), the local stack is started (``perfkit.metrics.stack.up``;
   components already running are left as they are; its Prometheus also scrapes the dataplane's
   counters from the generator's ``perfkit exporter``, ``exporter_targets``) with this process recorded as one of its owners
   (``perfkit clean`` leaves it alone meanwhile); ``close()`` stops the components started for runs,
   unless another live run still uses them (and never a stack started by hand);
4. if that fails, or the Pushgateway does not answer: the run goes on without pushing.

Then, with Prometheus reachable, the trials of older runs are retired from the Pushgateway
(``perfkit.metrics.retire``: only groups Prometheus has scraped; the run's own groups, and those
of runs that pushed within ``RETIRE_MIN_AGE`` -- still going beside this one -- stay), so that
pushes and scrapes do not slow down as runs pile up. A failure there is a warning, never the run's.

``push(store, trial)`` is called after the trial is on disk; every ``RETIRE_EVERY`` pushes the run's
own trials that Prometheus has are retired from the Pushgateway too, so that the stack's work per
scrape and push stays bounded during the run's trials (its servers also never run on a DUT core:
``perfkit.host.housekeeping``); a failure is reported once and counted;
after ``MAX_CONSECUTIVE_FAILURES`` in a row pushing stops for the run (``perfkit push --run ID``
backfills). ``save_cpu(store)`` keeps Prometheus' view of the DUT CPU per trial in the run directory
(windows of at least 3 scrape intervals; shorter trials are left to /proc/stat).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from perfkit import owners
from perfkit.campaign.model import MetricsSpec
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics import stack
from perfkit.metrics.config import load_endpoints
from perfkit.metrics.promconfig import targets_dir
from perfkit.metrics.push import push_trial, run_git_sha
from perfkit.metrics.query import check_endpoints, cpu_frame
from perfkit.metrics.retire import retire_runs
from perfkit.store import RunStore
from perfkit.trial import TrialResult

MAX_CONSECUTIVE_FAILURES = 3
#: Pushes from one retirement of the run's own scraped trials to the next: the Pushgateway then holds
#: about this many of the run's groups (plus any Prometheus has not scraped yet), and a scrape's and
#: a push's cost stays flat however long the run.
RETIRE_EVERY = 10
#: Runs that pushed within this many seconds are not retired at a session's start: they may be going.
RETIRE_MIN_AGE = 600.0
_ENV = ("PERFKIT_METRICS_CONFIG", "PERFKIT_PUSHGATEWAY_URL", "PERFKIT_PROMETHEUS_URL")


@dataclass
class MetricsSession:
    """Endpoints in use (or None) and what happened to the pushes."""

    endpoints: Any = None
    """``perfkit.metrics.Endpoints`` pushed to, or None (not pushing)."""
    note: str = ""
    """One line: what is used, or why nothing is."""
    stack_dir: str | None = None
    started: list[str] = field(default_factory=list)
    """Components of the local stack this session started (and ``close`` stops)."""
    prometheus_ok: bool = False
    pushed: int = 0
    failures: int = 0
    consecutive: int = 0
    first_error: str | None = None
    stopped_pushing: bool = False
    retire_note: str = ""
    """What retiring older runs from the Pushgateway did (or why it did not)."""
    retired_own: int = 0
    """The run's own trials retired from the Pushgateway as it went (Prometheus had them)."""
    cpu_note: str = ""
    cpu_missing: dict[str, str] = field(default_factory=dict)
    """Trials long enough for Prometheus that it has no CPU figures for (node-exporter down ...)."""
    exporter_targets: str | None = None
    """The local stack's ``targets/`` directory: the generator's ``perfkit exporter`` registers there, so
    the stack's Prometheus scrapes the dataplane's counters (None: no local stack)."""
    owner: dict[str, Any] | None = None
    """This process as an owner of the local stack (``perfkit.owners``): ``perfkit clean`` leaves the
    stack alone while it lives."""
    _pushed: set[str] | None = None
    say: Callable[[str], None] = print

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, spec: MetricsSpec, enabled: bool = True, say: Callable[[str], None] = print,
             run_id: str | None = None) -> MetricsSession:
        """Decide what to push to (module doc); with ``run_id``, retire other runs' trials then."""
        s = cls(say=say, stack_dir=spec.stack_dir)
        if not (enabled and spec.enabled):
            s.note = "metrics: off; trials are only written to disk (push them later: perfkit push --run RUN_ID)"
            return s
        explicit = spec.config or spec.prometheus_url or spec.pushgateway_url or any(os.environ.get(e) for e in _ENV)
        try:
            if explicit or not spec.start_local:
                s._use_configured(spec)
            else:
                s._start_local(spec)
        except (MetricsError, ConfigError) as err:
            s.endpoints = None
            s.note = f"metrics: not available ({err}); running without pushing"
        # only perfkit's own local stack: a lab's Pushgateway may be shared, and its users may read
        # other runs' groups from it (``perfkit metrics retire`` does it there by hand)
        if run_id is not None and not explicit and spec.start_local:
            s.retire_old_runs(run_id)
        return s

    def retire_old_runs(self, run_id: str) -> None:
        """Retire the trials of runs other than ``run_id`` that Prometheus has from the Pushgateway;
        a failure is said once as a warning (nothing is lost: only scraped groups are deleted)."""
        if self.endpoints is None or not self.prometheus_ok:
            return
        try:
            res = retire_runs(self.endpoints, [run_id], min_age=RETIRE_MIN_AGE)
        except MetricsError as err:
            self.retire_note = f"old runs not retired from the Pushgateway: {err}"
            self.say(f"warning: {self.retire_note}; the run goes on")
            return
        self.retire_note = res.describe()
        if res.retired:
            self.say(f"metrics: {self.retire_note}")

    def _start_local(self, spec: MetricsSpec) -> None:
        owner = owners.me()
        st = stack.up(spec.stack_dir, owner=owner)
        self.owner = owner
        self.started = list(st.started)
        self.endpoints = st.endpoints()
        self.exporter_targets = str(targets_dir(st.dir))
        self.prometheus_ok = True
        what = f"started {', '.join(st.started)}" if st.started else "already running"
        self.note = (f"metrics: local stack {what} (Prometheus {self.endpoints.prometheus_url}, "
                     f"Pushgateway {self.endpoints.pushgateway_url})")

    def _use_configured(self, spec: MetricsSpec) -> None:
        ep = load_endpoints(spec.config, prometheus_url=spec.prometheus_url, pushgateway_url=spec.pushgateway_url,
                            node_selector=spec.node_selector)
        checks = {c.name: c for c in check_endpoints(ep)}
        self.prometheus_ok = checks["prometheus"].ok
        if not checks["pushgateway"].ok:
            self.note = (f"metrics: Pushgateway {ep.pushgateway_url} not reachable ({checks['pushgateway'].detail}); "
                         "running without pushing")
            return
        self.endpoints = ep
        self.note = f"metrics: pushing to {ep.pushgateway_url} (from {ep.source})" + (
            "" if self.prometheus_ok else f"; Prometheus {ep.prometheus_url} not reachable")

    # -- during the run ----------------------------------------------------------------------
    @property
    def pushing(self) -> bool:
        return self.endpoints is not None and not self.stopped_pushing

    def already_pushed(self, store: RunStore) -> set[str]:
        """Trials of the run recorded as pushed when this session started (read once)."""
        if self._pushed is None:
            self._pushed = store.pushed_trial_ids()
        return self._pushed

    def push(self, store: RunStore, trial: TrialResult) -> None:
        """Push one trial already on disk; never raises for a metrics failure."""
        if not self.pushing:
            return
        try:
            push_trial(trial, self.endpoints, store, git_sha=run_git_sha(store))
        except MetricsError as err:
            self.failures += 1
            self.consecutive += 1
            if self.first_error is None:
                self.first_error = str(err)
                self.say(f"warning: {err}; the trial is on disk, the run goes on "
                         f"(backfill: perfkit push --run {store.run_id})")
            if self.consecutive >= MAX_CONSECUTIVE_FAILURES:
                self.stopped_pushing = True
                self.say(f"warning: {self.consecutive} pushes in a row failed; no more pushes in this run "
                         f"(backfill: perfkit push --run {store.run_id})")
            return
        self.pushed += 1
        self.consecutive = 0
        if self.pushed % RETIRE_EVERY == 0:
            self.retire_own(store.run_id)

    def retire_own(self, run_id: str) -> None:
        """Retire the run's own trials that Prometheus has scraped from the Pushgateway; a failure
        is a warning once (nothing is lost: an unscraped group stays)."""
        if self.endpoints is None or not self.prometheus_ok:
            return
        try:
            self.retired_own += retire_runs(self.endpoints, only=[run_id]).count("retired")
        except MetricsError as err:
            if not self.retire_note.startswith("own trials"):
                self.retire_note = f"own trials not retired from the Pushgateway: {err}"
                self.say(f"warning: {self.retire_note}; the run goes on")

    # -- at the end --------------------------------------------------------------------------
    def save_cpu(self, store: RunStore) -> None:
        """Save Prometheus' CPU frame of the run's trials (those long enough) into the run dir, with
        the trials it has no figures for (``RunStore.prometheus_cpu_missing``; the analysis takes
        their CPU from /proc/stat and says so)."""
        if self.endpoints is None or not self.prometheus_ok:
            return
        trials = store.trials()
        if trials.empty:
            return
        missing: dict[str, str] = {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                frame = cpu_frame(trials, self.endpoints, on_short="skip", on_missing="skip", wait=True,
                                  missing=missing)
        except (MetricsError, ConfigError) as err:
            self.cpu_note = f"Prometheus CPU frame not saved: {err}"
            self.say(f"warning: {self.cpu_note}")
            return
        covered = frame["trial_id"].nunique() if not frame.empty else 0
        self.cpu_missing = missing
        if covered or missing:
            store.write_prometheus_cpu(frame, missing)
        self.cpu_note = (f"Prometheus CPU frame: {covered} of {len(trials)} trials "
                         "(trials shorter than 3 scrape intervals use /proc/stat)")
        if missing:
            self.cpu_note += (f"; no Prometheus CPU for {len(missing)} longer trial(s) (node-exporter or Prometheus "
                              "down then?): they use /proc/stat too")
            self.say(f"warning: {self.cpu_note}")

    def close(self) -> None:
        """Leave the local stack: stop the components started for runs, unless another live run
        still uses them (``perfkit.metrics.stack.release``)."""
        if self.owner is None:
            return
        try:
            st = stack.release(self.stack_dir, self.owner)
            self.started = [c for c in self.started if c not in st.started]
        except (MetricsError, ConfigError) as err:
            self.say(f"warning: stopping the metrics stack failed: {err}")
        self.owner = None

    def to_dict(self) -> dict[str, Any]:
        return {"note": self.note, "pushgateway_url": getattr(self.endpoints, "pushgateway_url", None),
                "prometheus_url": getattr(self.endpoints, "prometheus_url", None), "pushed": self.pushed,
                "push_failures": self.failures, "first_error": self.first_error,
                "stopped_pushing": self.stopped_pushing, "retire": self.retire_note,
                "retired_own": self.retired_own, "cpu": self.cpu_note,
                "cpu_missing": sorted(self.cpu_missing)}
