"""Runs made once per test session from a campaign file, shared by the campaign/analysis/compare/report tests.

``session_runs()`` runs the campaign named by ``$PERFKIT_TEST_CAMPAIGN`` (default ``campaigns/smoke.yaml``,
simulated DUTs) once into a temporary data root: ``current``.
``runs_on_testbed()`` runs ``campaigns/smoke-xdp.yaml`` on the real local testbed (XDP generator,
PGW-U in the kernel) as ``current``, on its first variant only (uplink) and its trials cut to at
most ``SHORT_DURATIONS``, and a real
baseline for it cut down to its first frame size and flow count (a quarter of its scenarios, without
perf): the report tests execute the notebooks on them, and the comparison page gets figures compared
and figures new.
Metrics are off for these runs (tests of pushing make their own runs).
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from perfkit.campaign import run_campaign

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAMPAIGN = ROOT / "campaigns" / "smoke.yaml"
TESTBED_CAMPAIGN = ROOT / "campaigns" / "smoke-xdp.yaml"


@dataclass(frozen=True)
class SessionRuns:
    root: Path
    """The data root (``<tmp>/runs``) holding the runs."""
    campaign: Path
    baseline: str | None
    """The baseline run's id; None: there is only ``current``."""
    current: str


def produce_run(campaign: str | Path, root: str | Path, run_id: str, **kw: object):
    """Run ``campaign`` into ``root/run_id`` without metrics or progress bars; returns the RunOutcome."""
    kw.setdefault("metrics", False)
    kw.setdefault("progress", False)
    kw.setdefault("say", lambda msg: None)
    return run_campaign(campaign, run_id=run_id, root=root, **kw)


@lru_cache(maxsize=None)
def session_runs() -> SessionRuns:
    """One run (``current``) of ``$PERFKIT_TEST_CAMPAIGN``: what the campaign, analysis and compare
    tests read (the comparisons they test are of runs they make themselves)."""
    return _runs(Path(os.environ.get("PERFKIT_TEST_CAMPAIGN", DEFAULT_CAMPAIGN)))


@lru_cache(maxsize=None)
def runs_on_testbed() -> SessionRuns:
    """Two small runs on the real local testbed (``campaigns/smoke-xdp.yaml``): the reports'
    notebooks are executed on these. Only the comparison page reads the baseline: it is the same
    campaign on the first frame size and flow count only, without perf (about a quarter of the
    time of the whole campaign). Both runs take the first value of each dataplane parameter (the
    uplink): a second variant adds a colour or a panel of the same kind to each figure, and its
    scenarios doubled the runs' time (66 s here)."""
    campaign = Path(os.environ.get("PERFKIT_TEST_TESTBED_CAMPAIGN", TESTBED_CAMPAIGN))
    raw = _shorter_trials(yaml.safe_load(campaign.read_text()))
    raw["params"] = {k: v[:1] if isinstance(v, list) else v for k, v in (raw.get("params") or {}).items()}
    current_text = yaml.safe_dump(raw, sort_keys=False)
    flows = raw["flows"]
    raw.update(frame_sizes=raw["frame_sizes"][:1], perf=False,
               flows=dict(list(flows.items())[:1]) if isinstance(flows, dict) else flows[:1])
    return _runs(campaign, baseline_text=yaml.safe_dump(raw, sort_keys=False), current_text=current_text)


#: The trial durations of the testbed runs, at most (seconds): the reports show the same figures,
#: tables and search paths of shorter real trials.
SHORT_DURATIONS = {"duration": 0.5, "initial_duration": 0.1, "final_duration": 0.25}


def _shorter_trials(raw: dict) -> dict:
    """``raw`` (a campaign) with its methods' trial durations capped at ``SHORT_DURATIONS``."""
    for method in raw.get("methods") or []:
        params = method.get("params") or {}
        for key, cap in SHORT_DURATIONS.items():
            if key in params:
                params[key] = min(float(params[key]), cap)
    return raw


def _runs(campaign: Path, baseline_text: str | None = None, current_text: str | None = None) -> SessionRuns:
    """``current`` from ``campaign`` (or from ``current_text``, the file's name kept), after
    ``baseline`` from ``baseline_text`` if given."""
    tmp = Path(tempfile.mkdtemp(prefix="perfkit-test-runs-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    root = tmp / "runs"
    current = campaign
    if current_text is not None:
        (tmp / "current").mkdir()
        current = tmp / "current" / campaign.name
        current.write_text(current_text)
    runs = [("current", current)]
    if baseline_text is not None:
        baseline = tmp / f"baseline-{campaign.name}"
        baseline.write_text(baseline_text)
        runs.insert(0, ("baseline", baseline))
    for run_id, path in runs:
        out = produce_run(path, root, run_id)
        assert out.status == "complete", out.units_failed
    return SessionRuns(root, campaign, "baseline" if baseline_text is not None else None, "current")
