"""The experiment notebook's measuring: its ``campaign`` mapping, checked, run by the campaign runner.

``campaign`` has a campaign file's keys (``perfkit.campaign.schema``; what it leaves out takes the
schema's default), and an error names the key in the file's words (``campaign.frame_sizes[1]: 9 is
not allowed; allowed: 64 .. 9018``; the limits are ``perfkit.scenario.FRAME_MIN``/``FRAME_MAX``).
``run`` runs it with the code ``perfkit run`` uses (each trial fsynced before it is pushed, a
progress bar); the run keeps the mapping as its campaign's text, and ``resume`` continues a run
only with the campaign it started with.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from tqdm import tqdm

from perfkit.campaign import Campaign, RunOutcome, from_mapping, resume_campaign, run_campaign
from perfkit.campaign.backend import preflight
from perfkit.campaign.schema import load_mapping, to_text
from perfkit.campaign.units import estimate, expand
from perfkit.errors import ConfigError, StoreError
from perfkit.store import DEFAULT_ROOT, RunStore

#: The campaign's ``source`` when it comes from the notebook's ``campaign`` parameter.
SOURCE = "notebooks/experiment.ipynb"


def check(campaign: Mapping[str, Any], cpus: int | None = None) -> Campaign:
    """The validated ``Campaign`` of the mapping ``campaign``, with the runner's checks before traffic
    (the backend, its options); ``cpus``: resolve ``dut_cores: auto`` for that many CPUs."""
    checked = from_mapping(campaign, text=to_text(campaign, f"the campaign parameter of {SOURCE}"),
                           source=SOURCE, cpus=cpus)
    preflight(checked)
    return checked


def plan_markdown(campaign: Campaign) -> str:
    """What the campaign will do: scenarios, units, the estimate, the generator, the metrics."""
    gen = campaign.generator
    options = ", ".join(f"{k}={v!r}" for k, v in gen.options.items())
    ms = campaign.metrics
    metrics = ("off" if not ms.enabled else
               f"push to {ms.pushgateway_url}" if ms.pushgateway_url else
               "the local Prometheus/Pushgateway/node-exporter stack" if ms.start_local else "the configured endpoints")
    return "\n".join([
        f"**{campaign.name}**" + (f": {campaign.description}" if campaign.description else ""),
        (f"- dataplanes {', '.join(f'`{d}`' for d in campaign.dataplanes)} (one per part)"
         if len(campaign.dataplanes) > 1 else f"- dataplane `{campaign.dataplane}`, parameters "
         + ", ".join(f"{n}={list(v) if len(v) > 1 else v[0]!r}" for n, v in campaign.params)),
        f"- {len(campaign.scenarios())} scenarios x {len(campaign.methods)} methods "
        f"({', '.join(m.label for m in campaign.methods)}) x {campaign.repeats} repeats = {len(expand(campaign))} units",
        f"- generator `{gen.backend}`" + (f" ({options})" if options else ""),
        f"- metrics: {metrics}",
        f"- estimate: {estimate(campaign).describe()}",
    ])


@dataclass
class ExperimentRun:
    """What ``run`` did: the runner's outcome and every line it said."""

    run_id: str
    root: Path
    """The runs directory the run is in."""
    outcome: RunOutcome
    messages: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.root / self.run_id

    def markdown(self) -> str:
        o = self.outcome
        lines = [f"**run `{self.run_id}`: {o.status}**, {o.units_done_before + o.units_done} of {o.units_total} "
                 f"units done, {o.trials_written} trials written"
                 + (f", {o.trials_replayed} replayed" if o.trials_replayed else "")
                 + f" in {o.wall_seconds:.0f} s; data in `{self.path}`"]
        lines += [f"- failed: {unit}: {err}" for unit, err in o.units_failed.items()]
        lines += [f"- {m}" for m in self.messages]
        if o.status != "complete":
            lines.append(f"- retry the failed units: `perfkit experiment --resume {self.run_id}` "
                         f"(or set `resume = \"{self.run_id}\"` here)")
        return "\n".join(lines)

    def metrics_markdown(self) -> str:
        """Pushes to the Pushgateway and the CPU pulled back from Prometheus."""
        m = self.outcome.metrics or {}
        if not m.get("pushgateway_url"):
            return f"- {m.get('note') or 'metrics: off'}"
        total = self.outcome.trials_written
        lines = [f"- pushed {m.get('pushed', 0)} of {total} new trials to the Pushgateway {m['pushgateway_url']}"
                 + (f"; {m['push_failures']} failed (backfill: `perfkit push --run {self.run_id}`)"
                    if m.get("push_failures") else ""),
                 f"- node-exporter CPU pulled back from Prometheus {m.get('prometheus_url')}: "
                 + (m.get("cpu") or "nothing (Prometheus not reachable)")]
        return "\n".join(lines)


def runs_root(root: str | Path | None) -> Path:
    """The runs directory, absolute (None: ``perfkit.store.DEFAULT_ROOT``, as ``--root``'s default)."""
    return Path(root if root is not None else DEFAULT_ROOT).absolute()


def run(campaign: Mapping[str, Any], *, run_id: str | None = None, resume: str | None = None,
        root: str | Path | None = None, progress: bool = True,
        say: Callable[[str], None] | None = None) -> ExperimentRun:
    """Run ``campaign`` (a mapping with a campaign file's keys) with the campaign runner into
    ``root/<run_id>`` (``run_id`` None: a time stamp); ``resume``: instead continue that run, which
    must have been started with the same campaign. ``KeyboardInterrupt`` (Ctrl-C, a kernel
    interrupt) goes through once the testbed is down and the run marked ``interrupted``."""
    where = runs_root(root)
    if resume is not None and run_id is not None:
        raise ConfigError("run_id", run_id, "None with resume (the run keeps its id)")
    checked = check(campaign)
    messages: list[str] = []

    def tell(msg: str) -> None:
        messages.append(msg)
        if say is not None:
            say(msg)
        else:
            tqdm.write(msg, file=sys.stderr)

    # bars redrawn at most once a second: each redraw is a message from the kernel (and relayed by papermill)
    os.environ.setdefault("TQDM_MININTERVAL", "1")
    common: dict[str, Any] = {"root": where, "progress": progress, "say": tell}
    if resume is not None:
        stored = RunStore.open(resume, where).metadata().get("campaign", {})
        if "text" in stored:
            before = from_mapping(load_mapping(stored["text"], stored.get("source", SOURCE)), source=SOURCE,
                                  cpus=stored.get("cpus"))
            now = from_mapping(campaign, source=SOURCE, cpus=stored.get("cpus"))
            if _comparable(before) != _comparable(now):
                raise StoreError(f"run {resume} was started with another campaign than this one; resume it with its "
                                 f"own (perfkit experiment --resume {resume}) or start a new run (resume = None)")
        outcome = resume_campaign(resume, **common)
    else:
        outcome = run_campaign(checked, run_id=run_id, **common)
    return ExperimentRun(outcome.run_id, where, outcome, messages)


def _comparable(campaign: Campaign) -> dict[str, Any]:
    d = campaign.to_dict()
    d.pop("source", None)
    return d


def stored_campaign(run_id: str, root: str | Path | None = None) -> dict[str, Any]:
    """The campaign a run was started with, as a mapping (what ``--resume`` runs the notebook with)."""
    stored = RunStore.open(run_id, runs_root(root)).metadata().get("campaign", {})
    if "text" not in stored:
        raise StoreError(f"run {run_id} has no stored campaign in its metadata: it was not made by perfkit")
    return load_mapping(stored["text"], stored.get("source", "<stored>"))
