"""Running a campaign: one generator per scenario, every method on it, each trial on disk first.

``run_campaign(campaign)`` creates ``data/runs/<run_id>/`` (metadata: host, kernel, CPU, perfkit
git sha, BPF object hashes, the campaign text), prints the estimate, and runs the units (scenario x
repeat x method) under a tqdm bar. Each trial, the moment it ends, is appended to the store with its
``unit`` and ``attempt`` (one atomic Parquet file), then pushed (failures never stop the run).
A unit ends with ``searches/<unit>.json`` and a ``done`` line in the journal.

Resume (``resume_campaign(run_id)``, ``perfkit run --resume RUN_ID``) re-reads the campaign stored
in the run and skips every unit that is done. A unit that was interrupted is restarted from the
beginning of its search, but its trials already on disk are *replayed*: as long as the search asks
for the same (rate, duration) as the recorded trial at that position, it gets the recorded result
instead of new traffic. Searches are deterministic given their results, so the restarted search
walks the recorded path and goes on live exactly where the interruption was: no trial is measured
twice, none is lost. Should the search ask for something else (its code or generator changed), the
rest of the recorded trials are marked *superseded* in the journal (kept on disk, not part of the
unit's result) and the search continues live.

The generator of a scenario is created on the first trial that needs traffic (a scenario whose
units are all replayed or done never sets up the testbed) and closed when the scenario is done.

Crashes and stops. A run holds its directory's lock (``RunStore.lock``) while it works: a second
``perfkit run --resume`` of the same run is refused in one line. Any exception inside a unit (not
only a ``PerfkitError``) marks that unit failed (the journal keeps the traceback) and the run goes on
with the next; Ctrl-C and SIGTERM stop it as ``interrupted`` (the testbed and the metrics servers it
started are taken down) and it says how to resume; any other exception leaves it ``failed``: the
metadata never stays ``running`` while the process can still write it. After a SIGKILL, the resume
first repairs what the killed process left (``RunStore.recover``: unfinished ``.tmp`` files,
unreadable trial files; the journal's torn line) and says so; a done unit whose trial file or
search summary is gone is *reopened* and runs again, replaying what is still on disk.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import itertools
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from perfkit.campaign.journal import Journal
from perfkit.campaign.metadata import host_facts
from perfkit.campaign.metrics_session import MetricsSession
from perfkit.campaign.schema import Campaign, load_campaign, parse_campaign
from perfkit.campaign.units import Estimate, Unit, estimate, expand
from perfkit import owners, stop
from perfkit.crashpoints import crashpoint
from perfkit.errors import ConfigError, PerfkitError, StoreError
from perfkit.generators.base import Generator
from perfkit.store import DEFAULT_ROOT, RunStore
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult

#: Relative tolerance when matching a requested (rate, duration) with a recorded trial.
REPLAY_TOLERANCE = 1e-9


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


def _stderr(msg: str) -> None:
    tqdm.write(msg, file=sys.stderr)


# -- generators -------------------------------------------------------------------------------
def generator_class(backend: str) -> type:
    """The backend's class, imported now (a missing backend is a ``ConfigError`` before any run)."""
    from perfkit.generators import BACKENDS

    module_name, cls_name = BACKENDS[backend].split(":")
    try:
        return getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise ConfigError("campaign.generator.backend", backend, f"an available backend ({err})") from None


def generator_options(campaign: Campaign, scenario: Scenario, cls: type) -> dict[str, Any]:
    """The campaign's options, plus ``mtu`` (``jumbo_mtu`` if set) for scenarios whose frames need more
    than 1500 bytes, when the backend takes it."""
    options = dict(campaign.generator.options)
    if campaign.generator.jumbo_mtu is not None and campaign.needs_jumbo(scenario):
        params = inspect.signature(cls.__init__).parameters
        if "mtu" in params or campaign.generator.backend == "xdp":
            options["mtu"] = campaign.generator.jumbo_mtu
    return options


class LazyGenerator:
    """A scenario's generator, created (and entered) on the first live trial; closed by ``close``."""

    def __init__(self, cls: type, scenario: Scenario, options: dict[str, Any]):
        self.cls = cls
        self.scenario = scenario
        self.options = options
        self._gen: Any = None
        self._error: PerfkitError | None = None

    def _live(self) -> Any:
        if self._error is not None:
            raise self._error
        if self._gen is None:
            try:
                gen = self.cls(self.scenario, **self.options)
            except TypeError as err:
                self._error = ConfigError("campaign.generator.options", self.options,
                                          f"options {self.cls.__name__} accepts ({err})")
                raise self._error from None
            except PerfkitError as err:
                self._error = err
                raise
            self._gen = gen.__enter__()
        return self._gen

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        gen = self._live()
        crashpoint("trial.mid", after=duration / 2)
        return gen.measure(rate_pps, duration) if packets is None else gen.measure(rate_pps, duration, packets)

    def close(self) -> None:
        if self._gen is not None:
            gen, self._gen = self._gen, None
            gen.__exit__(None, None, None)


class ReplayMeasurer:
    """Serves a unit's recorded trials while the search asks for them, then measures live."""

    def __init__(self, live: LazyGenerator, recorded: list[TrialResult],
                 on_diverge: Callable[[list[TrialResult]], None], perf_dir: Path | None = None):
        self.live = live
        self.scenario = live.scenario
        #: Where ``perf record``'s folded stacks of live trials go (None: no perf).
        self.perf_dir = perf_dir
        #: Retries of disturbed trials (``Generator.disturbed_retries``), as the generator option says.
        self.disturbed_retries = live.options.get("disturbed_retries", Generator.disturbed_retries)
        self.pending = list(recorded)
        self.on_diverge = on_diverge
        self.replayed: set[str] = set()

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        if self.pending:
            rec = self.pending[0]
            if packets is None and _close(rec.intended_pps, rate_pps) and _close(rec.duration, duration):
                self.pending.pop(0)
                self.replayed.add(rec.trial_id)
                # the search's TrialLog adds its shortfall note again
                rec.notes = [n for n in rec.notes if not n.startswith("generator offered ")]
                return rec
            self.finish()
        if self.perf_dir is None:
            return self.live.measure(rate_pps, duration, packets)
        from perfkit.perf import record as perf_record, store as perf_store

        with perf_record.PerfRecorder(self.live._live().dut_cores) as rec:
            trial = self.live.measure(rate_pps, duration, packets)
        assert rec.profile is not None
        perf_store.write_folded(self.perf_dir, trial.trial_id, rec.profile.folded)
        return trial

    def finish(self) -> None:
        """Give up the recorded trials not asked for (they are superseded)."""
        if self.pending:
            rest, self.pending = self.pending, []
            self.on_diverge(rest)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REPLAY_TOLERANCE * max(abs(a), abs(b), 1e-12)


# -- running ----------------------------------------------------------------------------------
def run_campaign(campaign: Campaign | str | Path, *, run_id: str | None = None, root: Path | str = DEFAULT_ROOT,
                 metrics: bool = True, progress: bool = True, on_trial: Callable[[TrialResult], None] | None = None,
                 say: Callable[[str], None] = _stderr) -> RunOutcome:
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
    with stop.deferred():   # a stop waits for the directory and its metadata: half made, no resume takes it
        store = RunStore.create(run_id, root, _new_metadata(campaign, facts))
        store.lock()
    return _execute(store, campaign, cls, resumed=False, metrics=metrics, progress=progress,
                    on_trial=on_trial, say=say)


def _host_check(seconds: float, say: Callable[[str], None]) -> dict[str, Any]:
    """``perfkit host check`` for ``seconds`` before any traffic, for the run's metadata and the
    report's index."""
    from perfkit.host.check import check_host

    try:
        hc = check_host(seconds)
    except PerfkitError as err:
        say(f"host check: {err}")
        return {"error": str(err)}
    say(hc.summary())
    return hc.to_dict()


def _new_metadata(campaign: Campaign, facts: dict[str, Any]) -> dict[str, Any]:
    return {**facts, "status": "running", "started_at": time.time(), "generator": campaign.generator.backend,
            "campaign": {"name": campaign.name, "source": campaign.source, "text": campaign.text,
                         "sha256": hashlib.sha256(campaign.text.encode()).hexdigest(),
                         "cpus": facts["cpus"], "parsed": campaign.to_dict()},
            "units_total": len(expand(campaign)), "estimate": estimate(campaign).to_dict(),
            "shared_core_counts": list(campaign.shared_cores), "resumes": []}


def resume_campaign(run_id: str, *, root: Path | str = DEFAULT_ROOT, campaign_path: str | Path | None = None,
                    metrics: bool = True, progress: bool = True,
                    on_trial: Callable[[TrialResult], None] | None = None,
                    say: Callable[[str], None] = _stderr) -> RunOutcome:
    """Continue an interrupted run with the campaign it stored (see module doc)."""
    store = RunStore.open(run_id, root)
    store.lock()
    try:
        notes: list[str] = []
        meta = _stored_metadata(store, campaign_path, notes)
        stored = meta.get("campaign") or {}
        if "text" not in stored:
            raise StoreError(f"run {run_id} has no stored campaign in its metadata: it was not made by perfkit run")
        if campaign_path is not None:
            text = _read_campaign_text(campaign_path)
            if hashlib.sha256(text.encode()).hexdigest() != stored.get("sha256"):
                raise StoreError(f"campaign: {campaign_path} differs from the campaign run {run_id} started with; "
                                 "resume without the file (the stored campaign is used) or start a new run")
        campaign = parse_campaign(stored["text"], source=stored.get("source", "<stored>"), cpus=stored.get("cpus"))
        cls = preflight(campaign)
        _repair(store, notes)
        for note in notes:
            say(f"note: {note}")
        facts = host_facts()
        changed = [k for k in ("host", "kernel", "cpu_model") if facts.get(k) != meta.get(k)]
        if facts["perfkit"]["git_sha"] != meta.get("perfkit", {}).get("git_sha"):
            changed.append("perfkit git sha")
        if changed:
            say(f"warning: resuming run {run_id} with a different {', '.join(changed)} than it started with; "
                "its figures may not be comparable")
        meta.setdefault("resumes", []).append({"time": time.time(), "host": facts["host"], "kernel": facts["kernel"],
                                               "git_sha": facts["perfkit"]["git_sha"], "changed": changed,
                                               "notes": notes})
        meta["status"] = "running"
        store.write_metadata({k: v for k, v in meta.items() if k != "run_id"})
    except BaseException:
        store.unlock()
        raise
    return _execute(store, campaign, cls, resumed=True, metrics=metrics, progress=progress,
                    on_trial=on_trial, say=say, notes=notes)


def _read_campaign_text(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError("campaign", str(path), f"a readable YAML file ({err.__class__.__name__})") from None


def _stored_metadata(store: RunStore, campaign_path: str | Path | None, notes: list[str]) -> dict[str, Any]:
    """The run's metadata; if it is corrupt and the campaign file is given, rebuilt from that file
    (the corrupt one is kept as ``metadata.json.corrupt``)."""
    try:
        return store.metadata()
    except StoreError:
        if campaign_path is None:
            raise
    campaign = load_campaign(campaign_path)
    units = {u.id for u in expand(campaign)}
    known = {e.get("unit") for e in Journal(store.path).events() if e.get("unit")}
    if known - units:
        raise StoreError(f"{store.path / 'metadata.json'}: corrupt, and campaign {campaign_path} is not the one "
                         f"run {store.run_id} ran (its journal names units the file lacks, e.g. "
                         f"{sorted(known - units)[0]}); restore metadata.json from a backup")
    bad = store.path / "metadata.json"
    os.replace(bad, bad.with_name("metadata.json.corrupt"))
    meta = _new_metadata(campaign, host_facts())
    meta["rebuilt_from"] = str(campaign_path)
    store.write_metadata(meta)
    notes.append(f"metadata.json was corrupt: rebuilt from {campaign_path} (the corrupt file is kept as "
                 "metadata.json.corrupt; host facts are those of this machine now)")
    return store.metadata()


def _repair(store: RunStore, notes: list[str]) -> None:
    """Before a resume: tidy what a killed process left, and reopen done units that lost a file."""
    journal = Journal(store.path)
    state = journal.state()
    if state.torn:
        notes.append(f"{journal.path.name}: torn line(s) {', '.join(map(str, state.torn))} ignored (a process "
                     "died while writing them)")
    done_trials = {tid: unit for unit, e in state.done.items() for tid in e.get("trial_ids", [])}
    rec = store.recover(done_trials)
    notes.extend(rec.notes)
    torn_pushes = store.pushes_torn_lines()
    if torn_pushes:
        notes.append(f"pushes.jsonl: torn line(s) {', '.join(map(str, torn_pushes))} ignored; the trial such a "
                     f"line recorded counts as not pushed (perfkit push --run {store.run_id} pushes it again)")
    on_disk = {f.name.split(".", 1)[0].split("-", 1)[-1] for f in (store.path / "trials").glob("[0-9]*.parquet")}
    for unit, event in state.done.items():
        lost = [t for t in event.get("trial_ids", []) if t not in on_disk]
        why = None
        if lost:
            why = f"{len(lost)} of its trial files missing or unreadable ({lost[0]} ...)"
        else:
            summary = store.path / "searches" / f"{unit}.json"
            try:
                json.loads(summary.read_bytes())
            except FileNotFoundError:
                why = f"its search summary {summary.name} is missing"
            except ValueError:
                os.replace(summary, summary.with_name(summary.name + ".corrupt"))
                why = f"its search summary {summary.name} was corrupt (kept as {summary.name}.corrupt)"
        if why:
            journal.append("reopened", unit=unit, reason=why)
            notes.append(f"unit {unit} runs again: {why}; its readable trials are replayed, not measured again")


def preflight(campaign: Campaign) -> type:
    """Check what can be checked before traffic: the backend imports; sim options build a model."""
    cls = generator_class(campaign.generator.backend)
    try:  # an option the backend does not take is refused now, not at its first unit
        inspect.signature(cls).bind(campaign.scenarios()[0], **campaign.generator.options)
    except TypeError:
        known = [n for n, p in inspect.signature(cls).parameters.items() if p.kind is p.KEYWORD_ONLY
                 or (p.kind is p.POSITIONAL_OR_KEYWORD and n != "scenario")]
        bad = [k for k in campaign.generator.options if k not in known]
        raise ConfigError(f"campaign.generator.options.{bad[0] if bad else ''}".rstrip("."),
                          campaign.generator.options.get(bad[0]) if bad else campaign.generator.options,
                          f"options of the {campaign.generator.backend} generator: {', '.join(known)}") from None
    check = getattr(cls, "check_scenario", None)
    for scenario in campaign.scenarios() if check else ():
        try:
            check(scenario)
        except ConfigError as err:
            raise ConfigError(f"campaign.{err.field} ({scenario.key})", err.value, err.allowed) from None
    if campaign.generator.backend == "sim":
        scenario = campaign.scenarios()[0]
        try:
            cls(scenario, **campaign.generator.options).close()
        except TypeError as err:
            raise ConfigError("campaign.generator.options", campaign.generator.options,
                              f"options {cls.__name__} accepts ({err})") from None
        except ConfigError as err:
            raise ConfigError(f"campaign.generator.options ({err.field})", err.value, err.allowed) from None
    return cls


def _recorded(store: RunStore, superseded: set[str]) -> dict[str, list[TrialResult]]:
    """unit id -> its trials on disk (not superseded), in the order they were written."""
    frame = store.trials()
    if frame.empty or "unit" not in frame:
        return {}
    out: dict[str, list[TrialResult]] = {}
    for rec in frame.to_dict("records"):
        unit = rec.get("unit")
        if isinstance(unit, str) and rec["trial_id"] not in superseded:
            out.setdefault(unit, []).append(TrialResult.from_record(rec))
    return out


def _execute(store: RunStore, campaign: Campaign, cls: type, *, resumed: bool, metrics: bool, progress: bool,
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
    recorded = _recorded(store, state.superseded)
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
        ms = MetricsSession.open(campaign.metrics, metrics and bool(todo), say=say, run_id=store.run_id)
        if todo:
            say(ms.note)
        bar = tqdm(total=len(units), initial=out.units_done_before, desc=campaign.name, unit="unit",
                   disable=not progress, dynamic_ncols=True)
        for scenario, group in itertools.groupby(todo, key=lambda u: u.scenario):
            gen = LazyGenerator(cls, scenario, generator_options(campaign, scenario, cls))
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
    from perfkit.search import run_method

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
