"""``perfkit bisect``: ``git bisect run`` whose every step measures the revision against the good one.

The controller (``run_bisect``) builds the good revision once (``perfci.sides``), checks the bad one
out in a worktree of its own, and runs there ``git bisect start BAD GOOD`` then ``git bisect run``
with the step command (``perfkit bisect-step --state FILE``: this perfkit, not the bisected one).
The user's checkout is never touched. With ``dataplane`` (a description file of the repository,
``perfci.userside``) the repository is the user's own: every step builds that revision's
description and object, and this perfkit measures both sides.

A step (``step``) builds the revision git checked out; a revision that does not build is ``skip``
(exit 125). Then it measures in rounds: every round runs the campaign's units once on the good side
and once on the revision, interleaved (the first of the pair alternating per round, as in ``ab``),
and takes the paired log-ratio of the figure (``--metric``: ``max`` for the max-rate figure, or a
search goal such as ``ndr``; the mean over the units that have it): d = ln(revision / good). From
round ``min_rounds`` on, the 95 % confidence interval of the mean of d (Student's t) is compared with
the threshold t = ln(1 - threshold/100):

- the whole interval below t: the revision is slower than the good one by more than the threshold:
  ``bad`` (exit 1);
- the whole interval above t: it is not: ``good`` (exit 0);
- after ``max_rounds`` rounds still across t: ``skip`` (exit 125): undecided within the budget.

Pairing the rounds takes out what the host does to both alike; each round is one pair, so one
round's figures are never compared with another's. Every step's figures go to the state file; the
controller prints them with the first bad commit. A step that cannot go on (a bad ``--metric``, an
unexpected error) exits 128, which makes ``git bisect run`` stop: nothing is marked on a guess.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats

from perfkit.analysis import load_run, throughput_table
from perfkit.errors import ConfigError, PerfkitError
from perfkit.paths import CHECKOUT
from perfkit.perfci.session import Measured, Session
from perfkit.perfci.sides import Side, SideError, clean_env, git, resolve, run_child
from perfkit.perfci.userside import DataplaneSide, build_side, side_campaign

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128
#: Confidence of the interval that must clear the threshold.
CONFIDENCE = 0.95


@dataclass
class BisectConfig:
    """What every step needs (the state file's ``config``)."""

    repo: str
    good_commit: str
    good_tree: str
    """The good revision's built worktree."""
    campaign: str
    metric: str
    threshold_pct: float
    """A revision is bad when it is slower than the good one by more than this [%]."""
    min_rounds: int
    max_rounds: int
    workdir: str
    root: str
    """The run store the steps' runs are merged into."""
    dataplane: str = ""
    """The description file of the user's repository, relative to it ("": the revisions are perfkit's)."""


@dataclass
class Step:
    """One revision judged: its rounds' figures and the answer given to git."""

    commit: str
    verdict: str
    """``good``, ``bad`` or ``skip``."""
    why: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    """Per round: ``good_mpps``, ``rev_mpps`` (means over the matching figures), ``log_ratio``."""
    change_pct: float | None = None
    """exp(mean log-ratio) - 1 [%]."""
    ci_pct: tuple[float, float] | None = None
    """The confidence interval of the change [%]."""
    runs: dict[str, str] = field(default_factory=dict)
    """Side -> the merged run of its units in this step."""


def decide(log_ratios: list[float], threshold_pct: float, min_rounds: int, max_rounds: int) -> tuple[str, tuple[float, float] | None]:
    """(``good`` | ``bad`` | ``more`` | ``skip``, the CI of the mean log-ratio) per the module doc."""
    n = len(log_ratios)
    if n < max(2, min_rounds):
        return "more", None
    d = np.asarray(log_ratios, dtype=float)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    lo, hi = float(d.mean()) - half, float(d.mean()) + half
    limit = math.log(1 - threshold_pct / 100)
    if hi < limit:
        return "bad", (lo, hi)
    if lo > limit:
        return "good", (lo, hi)
    return ("skip" if n >= max_rounds else "more"), (lo, hi)


def figure_value(run_id: str, root: Path, metric: str) -> float | None:
    """The mean [pps] of the run's figures whose goal is ``metric`` (None: it has none)."""
    tp = throughput_table(load_run(run_id, root))
    d = tp[tp["goal"].astype(str).str.lower() == metric.lower()] if not tp.empty else tp
    values = d["throughput_pps"].dropna() if not d.empty else d
    return float(values.mean()) if len(values) else None


def goals_of(run_id: str, root: Path) -> list[str]:
    tp = throughput_table(load_run(run_id, root))
    return sorted(set(tp["goal"].astype(str))) if not tp.empty else []


# -- one step (inside git bisect run) ---------------------------------------------------------------
def step(state_file: Path, say: Callable[[str], None]) -> int:
    """Judge the revision checked out in the bisect worktree; returns git's exit code."""
    state = json.loads(state_file.read_text())
    cfg = BisectConfig(**state["config"])
    tree = Path(state["bisect_tree"])
    commit = git(tree, "rev-parse", "HEAD")
    for name in [k for k in os.environ if k.startswith("GIT_")]:   # git bisect run's GIT_DIR: see sides.clean_env
        del os.environ[name]
    work = Path(cfg.workdir)
    n = len(state["steps"]) + 1
    say(f"bisect step {n}: {commit[:10]} ({git(tree, 'log', '-1', '--format=%s', 'HEAD')})")
    good = (DataplaneSide("good", cfg.good_commit, cfg.good_commit, Path(cfg.repo), Path(cfg.good_tree),
                          description=cfg.dataplane) if cfg.dataplane else
            Side("good", cfg.good_commit, cfg.good_commit, Path(cfg.repo), Path(cfg.good_tree)))
    try:
        rev = build_side(Path(cfg.repo), commit, work / "trees", f"step{n}", "--rev", cfg.dataplane or None)
    except SideError as err:
        return _record(state_file, Step(commit, "skip", f"does not build: {err}"), say)
    try:
        return _measure(state_file, cfg, good, rev, work / f"step{n}", n, say)
    except SideError as err:
        return _record(state_file, Step(commit, "skip", f"does not run: {err}"), say)
    finally:
        rev.close()


def _measure(state_file: Path, cfg: BisectConfig, good: Side, rev: Side, work: Path, n: int,
             say: Callable[[str], None]) -> int:
    session = Session(side_campaign(Path(cfg.campaign), Path(cfg.repo), cfg.dataplane or None), work, say)
    measured: dict[str, Measured] | None = None
    result = Step(rev.commit, "skip", "")
    logs: list[float] = []
    verdict, ci = "more", None
    for k in range(1, cfg.max_rounds + 1):
        measured = session.measure(good, rev, 1, first_repeat=k, done=measured)
        g = [figure_value(rid, session.scratch, cfg.metric) for _, r, rid in measured[good.name].parts if r == k]
        v = [figure_value(rid, session.scratch, cfg.metric) for _, r, rid in measured[rev.name].parts if r == k]
        if any(x is None for x in g + v):
            rid = measured[good.name].parts[-1][2]
            raise ConfigError("--metric", cfg.metric, "a figure of the campaign's units: "
                              + ", ".join(goals_of(rid, session.scratch) or ["(none)"]))
        gm, vm = float(np.mean(g)), float(np.mean(v))
        if gm <= 0 or vm <= 0:
            logs.append(math.log(max(vm, 1.0) / max(gm, 1.0)))
        else:
            logs.append(math.log(vm / gm))
        result.rounds.append({"round": k, "good_mpps": gm / 1e6, "rev_mpps": vm / 1e6, "log_ratio": logs[-1]})
        verdict, ci = decide(logs, cfg.threshold_pct, cfg.min_rounds, cfg.max_rounds)
        say(f"  round {k}: good {gm / 1e6:.4g} Mpps, revision {vm / 1e6:.4g} Mpps ({math.expm1(logs[-1]) * 100:+.1f} %)"
            + (f"; change {math.expm1(np.mean(logs)) * 100:+.1f} %, {CONFIDENCE:.0%} CI "
               f"[{math.expm1(ci[0]) * 100:+.1f}, {math.expm1(ci[1]) * 100:+.1f}] % vs -{cfg.threshold_pct:g} %"
               if ci else ""))
        if verdict != "more":
            break
    result.verdict = verdict
    result.change_pct = math.expm1(float(np.mean(logs))) * 100
    result.ci_pct = (math.expm1(ci[0]) * 100, math.expm1(ci[1]) * 100) if ci else None
    result.why = {"good": f"not slower than the good revision by more than {cfg.threshold_pct:g} %",
                  "bad": f"slower than the good revision by more than {cfg.threshold_pct:g} %",
                  "skip": f"undecided after {len(logs)} rounds (the budget)"}[verdict]
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for side in (good, rev):
        rid = f"bisect-{stamp}-s{n}-{side.name}-{side.commit[:7]}"
        session.merge(measured[side.name], Path(cfg.root), rid, {"bisect": {"step": n}})
        result.runs[side.name] = rid
    return _record(state_file, result, say)


def _record(state_file: Path, result: Step, say: Callable[[str], None]) -> int:
    state = json.loads(state_file.read_text())
    state["steps"].append(asdict(result))
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, state_file)
    say(f"  -> {result.verdict}: {result.why}")
    return {"good": GOOD, "bad": BAD, "skip": SKIP}[result.verdict]


# -- the controller ---------------------------------------------------------------------------------
@dataclass
class BisectResult:
    first_bad: str | None
    """The first bad commit; None when skips left several candidates."""
    candidates: list[str]
    """The commits it could be (one when found)."""
    subject: str
    steps: list[dict[str, Any]]
    measured_steps: int
    """Steps that measured (not skipped for a failed build)."""
    change_pct: float | None
    """The first bad commit's measured change vs the good revision [%]."""
    log: str
    """git bisect's log."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_bisect(repo: Path, good: str, bad: str, campaign: Path, *, metric: str, threshold_pct: float,
               min_rounds: int = 3, max_rounds: int = 8, root: Path, workdir: Path | None = None,
               dataplane: str | None = None, say: Callable[[str], None] = print) -> BisectResult:
    """Bisect ``good..bad`` of ``repo`` (module doc); ``dataplane``: a description file of ``repo``."""
    good_c, bad_c = resolve(repo, good, "--good"), resolve(repo, bad, "--bad")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_c, bad_c]).returncode != 0:
        raise ConfigError("--good", good, f"an ancestor of --bad {bad}")
    if good_c == bad_c:
        raise ConfigError("--good", good, f"a revision before --bad {bad}")
    side_campaign(Path(campaign), repo, dataplane)   # a bad campaign is refused before anything is built
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="perfkit-bisect-")) if own else Path(workdir)
    tree = work / "bisect"
    good_side: Side | None = None
    try:
        say(f"building the good revision {good} ({good_c[:10]})")
        good_side = build_side(repo, good_c, work / "trees", "good", "--good", dataplane)
        if tree.exists():
            shutil.rmtree(tree)
        git(repo, "worktree", "add", "--detach", str(tree), bad_c)
        cfg = BisectConfig(str(repo), good_c, str(good_side.path), str(Path(campaign).absolute()), metric,
                           threshold_pct, min_rounds, max_rounds, str(work), str(Path(root).absolute()), dataplane or "")
        state_file = work / "bisect-state.json"
        state_file.write_text(json.dumps({"config": asdict(cfg), "bisect_tree": str(tree), "steps": []}, indent=2))
        git(tree, "bisect", "start", bad_c, good_c)
        env = {**clean_env(), "PYTHONPATH": str(CHECKOUT or Path(__file__).resolve().parents[2])}
        cmd = [sys.executable, "-P", "-m", "perfkit", "bisect-step", "--state", str(state_file)]
        run = run_child(["git", "-C", str(tree), "bisect", "run", *cmd], None, env, capture=False, group=True)
        log = git(tree, "bisect", "log", check=False)
        steps = json.loads(state_file.read_text())["steps"]
        found = re.search(r"^([0-9a-f]{40}) is the first bad commit", run.stdout, re.M)
        if run.returncode != 0 and not found:
            aborted = next((s for s in reversed(run.stdout.splitlines()) if s.strip()), "")
            raise PerfkitError(f"git bisect run stopped (exit {run.returncode}): {aborted}")
        if found:
            candidates = [found.group(1)]
        else:
            candidates = re.findall(r"^([0-9a-f]{40})$", run.stdout, re.M)
        first = candidates[0] if len(candidates) == 1 else None
        subject = git(repo, "log", "-1", "--format=%s", first) if first else ""
        change = next((s["change_pct"] for s in steps if s["commit"] == first), None)
        measured = sum(1 for s in steps if s["rounds"])
        return BisectResult(first, candidates, subject, steps, measured, change, log)
    finally:
        if tree.exists():
            git(tree, "bisect", "reset", check=False)
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        if good_side is not None:
            good_side.close()
        if own:
            shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
