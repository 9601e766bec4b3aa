"""Runs made once per test session from a campaign file, shared by the campaign/analysis/compare/report tests.

``session_runs()`` runs the campaign named by ``$PERFKIT_TEST_CAMPAIGN`` (default ``campaigns/smoke.yaml``,
simulated DUTs) twice into a temporary data root: ``baseline`` first, then ``current``.
``runs_on_testbed()`` does the same with ``campaigns/smoke-xdp.yaml`` on the real local testbed (XDP
generator, PGW-U in the kernel): the report tests execute the notebooks on it.
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

from perfkit.campaign import run_campaign

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAMPAIGN = ROOT / "campaigns" / "smoke.yaml"
TESTBED_CAMPAIGN = ROOT / "campaigns" / "smoke-xdp.yaml"


@dataclass(frozen=True)
class SessionRuns:
    root: Path
    """The data root (``<tmp>/runs``) holding both runs."""
    campaign: Path
    baseline: str
    current: str


def produce_run(campaign: str | Path, root: str | Path, run_id: str, **kw: object):
    """Run ``campaign`` into ``root/run_id`` without metrics or progress bars; returns the RunOutcome."""
    kw.setdefault("metrics", False)
    kw.setdefault("progress", False)
    kw.setdefault("say", lambda msg: None)
    return run_campaign(campaign, run_id=run_id, root=root, **kw)


@lru_cache(maxsize=None)
def session_runs() -> SessionRuns:
    return _two_runs(Path(os.environ.get("PERFKIT_TEST_CAMPAIGN", DEFAULT_CAMPAIGN)))


@lru_cache(maxsize=None)
def runs_on_testbed() -> SessionRuns:
    """Two small runs on the real local testbed (``campaigns/smoke-xdp.yaml``): the reports'
    notebooks are executed on these."""
    return _two_runs(Path(os.environ.get("PERFKIT_TEST_TESTBED_CAMPAIGN", TESTBED_CAMPAIGN)))


def _two_runs(campaign: Path) -> SessionRuns:
    tmp = Path(tempfile.mkdtemp(prefix="perfkit-test-runs-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    root = tmp / "runs"
    for run_id in ("baseline", "current"):
        out = produce_run(campaign, root, run_id)
        assert out.status == "complete", out.units_failed
    return SessionRuns(root, campaign, "baseline", "current")
