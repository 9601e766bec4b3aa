"""Resuming a campaign run: the campaign it stored, what a killed process left repaired, the rest run.

``resume_campaign(run_id)`` (``perfkit run --resume RUN_ID``) re-reads the campaign stored in the
run and skips every unit that is done; an interrupted unit replays its trials on disk
(``perfkit.campaign.replay``). After a SIGKILL, the resume first repairs what the killed process left
(``RunStore.recover``: unfinished ``.tmp`` files, unreadable trial files; the journal's torn line)
and says so; a done unit whose trial file or search summary is gone is *reopened* and runs again,
replaying what is still on disk. A corrupt ``metadata.json`` is rebuilt from the campaign file when
it is given and is the one the run ran.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from perfkit.campaign.backend import preflight
from perfkit.campaign.journal import Journal
from perfkit.campaign.metadata import host_facts
from perfkit.campaign.runner import RunOutcome, execute, new_metadata, say_stderr
from perfkit.campaign.schema import load_campaign, parse_campaign, read_text
from perfkit.campaign.units import expand
from perfkit.errors import StoreError
from perfkit.store import DEFAULT_ROOT, RunStore
from perfkit.trial import TrialResult


def resume_campaign(run_id: str, *, root: Path | str = DEFAULT_ROOT, campaign_path: str | Path | None = None,
                    metrics: bool = True, progress: bool = True,
                    on_trial: Callable[[TrialResult], None] | None = None,
                    say: Callable[[str], None] = say_stderr) -> RunOutcome:
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
            text = read_text(campaign_path)
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
    return execute(store, campaign, cls, resumed=True, metrics=metrics, progress=progress,
                    on_trial=on_trial, say=say, notes=notes)


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
    meta = new_metadata(campaign, host_facts())
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
