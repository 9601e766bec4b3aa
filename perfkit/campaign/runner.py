"""Running a campaign: one generator per scenario, every method on it, each trial on disk first.

``run_campaign(campaign)`` creates ``data/runs/<run_id>/`` (metadata: host, kernel, CPU, perfkit
git sha, BPF object hashes, the campaign text), prints the estimate, and runs the units (scenario x
repeat x method) under a tqdm bar. Each trial, the moment it ends, is appended to the store with its
``unit`` and ``attempt`` (one atomic Parquet file), then pushed (failures never stop the run).
A unit ends with ``searches/<unit>.json`` and a ``done`` line in the journal. ``execute`` runs the
units not done yet, for a new run and for a resumed one (``perfkit.campaign.resume``); a unit's
trials already on disk are replayed (``perfkit.campaign.replay``), its generator is created on the
first live trial (``perfkit.campaign.backend``) and closed when the scenario is done.

Crashes and stops. A run holds its directory's lock (``RunStore.lock``) while it works: a second
``perfkit run --resume`` of the same run is refused in one line. Any exception inside a unit (not
only a ``PerfkitError``) marks that unit failed (the journal keeps the traceback) and the run goes on
with the next; Ctrl-C and SIGTERM stop it as ``interrupted`` (the testbed and the metrics servers it
started are taken down) and it says how to resume; any other exception leaves it ``failed``: the
metadata never stays ``running`` while the process can still write it.
"""
from __future__ import annotations

import hashlib
import itertools
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from perfkit import owners, stop
from perfkit.campaign.backend import LazyGenerator, generator_options, preflight
from perfkit.campaign.journal import Journal
from perfkit.campaign.metadata import host_facts
from perfkit.provenance import dataplane_source
from perfkit.campaign.metrics_session import MetricsSession
from perfkit.campaign.model import Campaign
from perfkit.campaign.replay import ReplayMeasurer, recorded_trials
from perfkit.campaign.schema import load_campaign
from perfkit.campaign.units import Estimate, Unit, estimate, expand
from perfkit.crashpoints import crashpoint
from perfkit.errors import PerfkitError
from perfkit.host.check import check_host
from perfkit.search import run_method
from perfkit.store import DEFAULT_ROOT, RunStore
from perfkit.trial import TrialResult


@dataclass
class RunOutcome:
    """What one session of a campaign run did."""

    run_id: str
    path: Path
    status: str = "running"
    """``complete`` (every unit done), ``incomplete`` (some failed), ``interrupted`` (Ctrl-C, SIGTERM),
    ``failed`` (an unexpected error outside the units stopped the run)."""
    units_total: int = 0
    units_done_before: int = 0
    """Units already done when this session started (resume)."""
    units_done: int = 0
    """Units done by this session."""
    units_failed: dict[str, str] = field(default_factory=dict)
    """unit id -> error."""
    trials_written: int = 0
    trials_replayed: int = 0
    trials_superseded: int = 0
    estimate: Estimate | None = None
    wall_seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the resume repaired (torn journal line, unfinished files, unreadable trials ...)."""

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "path": str(self.path), "status": self.status,
                "units_total": self.units_total, "units_done_before": self.units_done_before,
                "units_done": self.units_done, "units_failed": dict(self.units_failed),
                "trials_written": self.trials_written, "trials_replayed": self.trials_replayed,
                "trials_superseded": self.trials_superseded,
                "estimate": self.estimate.to_dict() if self.estimate else None,
                "wall_seconds": round(self.wall_seconds, 1), "metrics": self.metrics, "notes": list(self.notes)}


def say_stderr(msg: str) -> None:
    """What a run says, by default: a line on stderr that does not break its progress bar."""
    tqdm.write(msg, file=sys.stderr)


# -- running ----------------------------------------------------------------------------------
def run_campaign(campaign: Campaign | str | Path, *, run_id: str | None = None, root: Path | str = DEFAULT_ROOT,
                 metrics: bool = True, progress: bool = True, on_trial: Callable[[TrialResult], None] | None = None,
                 say: Callable[[str], None] = say_stderr) -> RunOutcome:
    """Run a campaign (a ``Campaign`` or the path of its file) into a new run directory.

    ``on_trial`` is called after each new trial is on disk and pushed (tests interrupt here).
    Raises ``KeyboardInterrupt`` through (the run can be resumed).
    """
    if not isinstance(campaign, Campaign):
        campaign = load_campaign(campaign)
    cls = preflight(campaign)
    facts = host_facts()
    if campaign.generator.backend == "xdp":  # the host's stalls decide what zero loss can mean here
        facts["host_check"] = _host_check(campaign.generator.host_check_seconds, say)
    if campaign.generator.backend == "lab":   # the lab's hosts, roles and facts (no secret: perfkit.lab)
        from perfkit.lab.provision import lab_metadata
        facts["lab"] = lab_metadata(campaign.generator.options["inventory"])
    with stop.deferred():   # a stop waits for the directory and its metadata: half made, no resume takes it
        store = RunStore.create(run_id, root, new_metadata(campaign, facts))
        store.lock()
    return execute(store, campaign, cls, resumed=False, metrics=metrics, progress=progress,
                    on_trial=on_trial, say=say)


def _host_check(seconds: float, say: Callable[[str], None]) -> dict[str, Any]:
    """``perfkit host check`` for ``seconds`` before any traffic, for the run's metadata and the
    report's index."""
    try:
        hc = check_host(seconds)
    except PerfkitError as err:
        say(f"host check: {err}")
        return {"error": str(err)}
    say(hc.summary())
    return hc.to_dict()


def new_metadata(campaign: Campaign, facts: dict[str, Any]) -> dict[str, Any]:
    return {**facts, "status": "running", "started_at": time.time(), "generator": campaign.generator.backend,
            "campaign": {"name": campaign.name, "source": campaign.source, "text": campaign.text,
                         "sha256": hashlib.sha256(campaign.text.encode()).hexdigest(),
                         "cpus": facts["cpus"], "parsed": campaign.to_dict()},
            "dataplanes": {dp: dataplane_source(dp) for dp in campaign.dataplanes},
            "units_total": len(expand(campaign)), "estimate": estimate(campaign).to_dict(),
            "shared_core_counts": list(campaign.shared_cores), "resumes": []}


def execute(store: RunStore, campaign: Campaign, cls: type, *, resumed: bool, metrics: bool, progress: bool,
             on_trial: Callable[[TrialResult], None] | None, say: Callable[[str], None],
             notes: list[str] | None = None) -> RunOutcome:
    """Run the units not done yet; releases the run's lock at the end."""
    owners.set_run(store.run_id)
    try:
        return _execute_locked(store, campaign, cls, resumed=resumed, metrics=metrics, progress=progress,
                               on_trial=on_trial, say=say, notes=notes or [])
    finally:
        owners.set_run(None)
        store.unlock()


def _execute_locked(store: RunStore, campaign: Campaign, cls: type, *, resumed: bool, metrics: bool,
                    progress: bool, on_trial: Callable[[TrialResult], None] | None, say: Callable[[str], None],
                    notes: list[str]) -> RunOutcome:
    start = time.monotonic()
    journal = Journal(store.path)
    state = journal.state()
    units = expand(campaign)
    todo = [u for u in units if u.id not in state.done]
    out = RunOutcome(store.run_id, store.path, units_total=len(units), units_done_before=len(units) - len(todo),
                     notes=list(notes))
    out.estimate = estimate(campaign, todo)
    recorded = recorded_trials(store, state.superseded)
    session = state.session_count + 1
    journal.append("session", session=session, action="resume" if resumed else "start")
    say(f"run {store.run_id} ({store.path})" + (f": resuming, {out.units_done_before} of {len(units)} units done"
                                                if resumed else ""))
    say(f"campaign {campaign.name}: {out.estimate.describe()}")
    if campaign.shared_cores:
        counts = ", ".join(str(c) for c in campaign.shared_cores)
        say(f"note: with {counts} DUT cores the generator shares a core; those units are flagged")
    ms: MetricsSession | None = None
    bar: tqdm | None = None
    try:
        spec = campaign.metrics
        if campaign.generator.backend == "lab":   # the lab's metrics host, the DUT host's node-exporter
            from perfkit.lab.provision import lab_metrics
            spec = lab_metrics(spec, campaign.generator.options["inventory"])
        ms = MetricsSession.open(spec, metrics and bool(todo), say=say, run_id=store.run_id)
        if todo:
            say(ms.note)
        bar = tqdm(total=len(units), initial=out.units_done_before, desc=campaign.name, unit="unit",
                   disable=not progress, dynamic_ncols=True)
        for scenario, group in itertools.groupby(todo, key=lambda u: u.scenario):
            gen = LazyGenerator(cls, scenario, generator_options(campaign, scenario, cls, ms.exporter_targets))
            try:
                for unit in group:
                    stop.check()   # a stop pending (perfkit.stop): no unit starts
                    bar.set_postfix_str(unit.id)
                    _run_unit(unit, gen, store, journal, state.attempts.get(unit.id, 0) + 1,
                              recorded.get(unit.id, []), ms, out, on_trial, progress, say,
                              perf_dir=store.path if unit.method.label in campaign.perf else None)
                    bar.update(1)
            finally:
                gen.close()
        stop.check()
        out.status = "incomplete" if out.units_failed else "complete"
    except (KeyboardInterrupt, SystemExit):
        out.status = "interrupted"
        raise
    except BaseException as err:
        out.status = "failed"
        out.units_failed.setdefault("(run)", f"{type(err).__name__}: {err}")
        raise
    finally:
        if bar is not None:
            bar.close()
        if ms is not None:
            if out.status in ("complete", "incomplete"):
                _guarded(lambda: ms.save_cpu(store), "saving the Prometheus CPU frame", say)
            _guarded(ms.close, "stopping the metrics stack", say)
            out.metrics = ms.to_dict()
        out.wall_seconds = time.monotonic() - start
        _finish(store, journal, session, out, say)
    return out


def _guarded(action: Callable[[], None], what: str, say: Callable[[str], None]) -> None:
    """Run a clean-up step; an error in it is reported, and the run's status is still written."""
    try:
        action()
    except Exception as err:
        say(f"warning: {what} failed: {type(err).__name__}: {err}")


def _run_unit(unit: Unit, gen: LazyGenerator, store: RunStore, journal: Journal, attempt: int,
              recorded: list[TrialResult], ms: MetricsSession, out: RunOutcome,
              hook: Callable[[TrialResult], None] | None, progress: bool, say: Callable[[str], None],
              perf_dir: Path | None = None) -> None:
    def diverged(rest: list[TrialResult]) -> None:
        journal.append("superseded", unit=unit.id, trial_ids=[t.trial_id for t in rest])
        out.trials_superseded += len(rest)

    replay = ReplayMeasurer(gen, recorded, diverged, perf_dir)

    def on_trial(trial: TrialResult) -> None:
        if trial.trial_id in replay.replayed:
            out.trials_replayed += 1
            if ms.pushing and trial.trial_id not in ms.already_pushed(store):
                ms.push(store, trial)     # written before a crash, never pushed
            return
        if unit.shared_cores and not trial.shared_cores:
            trial.shared_cores = True
            trial.notes.append("DUT and generator shared a core (dut_cores = CPUs of the machine)")
        store.append(trial, extra={"unit": unit.id, "attempt": attempt})
        out.trials_written += 1
        ms.push(store, trial)
        if hook is not None:
            hook(trial)

    journal.append("start", unit=unit.id, attempt=attempt, replay=len(recorded))
    try:
        result = run_method(unit.method.name, replay, unit.method.resolved_params(unit.scenario),
                            on_trial=on_trial, progress=progress)
        replay.finish()
    except PerfkitError as err:
        journal.append("failed", unit=unit.id, attempt=attempt, error=str(err))
        out.units_failed[unit.id] = str(err)
        say(f"error: unit {unit.id} failed: {err} (a resume retries it)")
        return
    except Exception as err:   # a bug or an unforeseen failure: this unit fails, the run goes on
        error = f"{type(err).__name__}: {err}"
        journal.append("failed", unit=unit.id, attempt=attempt, error=error, traceback=traceback.format_exc())
        out.units_failed[unit.id] = error
        say(f"error: unit {unit.id} failed unexpectedly: {error} (traceback in {journal.path}; "
            "a resume retries it)")
        _guarded(gen.close, "closing the generator", say)   # its state is unknown: set it up anew
        return
    summary = {**unit.summary(), "attempt": attempt, "result": result.to_dict(with_trials=False),
               "trial_ids": [t.trial_id for t in result.trials], "replayed": len(replay.replayed)}
    store.write_search(unit.id, summary)
    crashpoint("unit.searched")
    journal.append("done", unit=unit.id, attempt=attempt, trial_ids=summary["trial_ids"])
    out.units_done += 1


def _finish(store: RunStore, journal: Journal, session: int, out: RunOutcome, say: Callable[[str], None]) -> None:
    journal.append("end", session=session, status=out.status, units_done=out.units_done,
                   units_failed=len(out.units_failed), trials_written=out.trials_written)
    meta = store.metadata()
    meta.pop("run_id", None)
    done = out.units_done_before + out.units_done
    meta.update(status=out.status, finished_at=time.time(), units_done=done,
                units_failed=dict(out.units_failed), metrics=out.metrics,
                wall_seconds=meta.get("wall_seconds", 0.0) + out.wall_seconds)
    store.write_metadata(meta)
    if out.status == "interrupted":
        say(f"interrupted after {out.trials_written} new trials ({done} of {out.units_total} units done); "
            f"resume with: perfkit run --resume {store.run_id}")
    elif out.status == "failed":
        say(f"the run stopped on an unexpected error ({done} of {out.units_total} units done, every trial so far "
            f"is on disk); resume with: perfkit run --resume {store.run_id}")
    elif out.units_failed:
        say(f"{len(out.units_failed)} unit(s) failed ({done} of {out.units_total} done); "
            f"retry them with: perfkit run --resume {store.run_id}")
