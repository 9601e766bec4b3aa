"""Performance CI: ``perfkit ab``, ``perfkit bisect``, ``perfkit history`` and the CI definitions.

Fast: the interleaved order, the bisection's decision rule, the unit campaigns, a whole ``ab`` of a
revision against itself on simulated DUTs (real worktrees, real ``make bpf``, each side's own
perfkit), a side that does not build, the GitHub workflow through actionlint and the GitLab job.
Slow: the scratch repository of eight commits (``tests/perfci_fixtures.py``) on the real testbed:
ab finds the planted commit's regression, a revision against itself shows no change, bisect finds
the planted commit in at most ceil(log2(8)) + 1 measured steps, history shows the step.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from perfkit.campaign.schema import from_mapping, load_campaign
from perfkit.campaign.units import expand
from perfkit.perfci.bisect import decide
from perfkit.perfci import gitlab_note
from perfkit.perfci.comment import COMMENT_MARKER
from perfkit.perfci.history import POINT_COLUMNS, _steps
from perfkit.perfci.units import interleaved, unit_mapping
from tests.perfci_fixtures import COMMITS, PLANTED, scratch_repo

ROOT = Path(__file__).resolve().parent.parent
ACTIONLINT = ROOT / "build" / "tools" / "bin" / "actionlint"
SIM_CAMPAIGN = """\
name: perfci-sim
dataplane: calib
params: {work_iterations: [100]}
frame_sizes: [64]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: sharp, threshold: 1Mpps}
methods:
  - method: maxrate
    params: {duration: 1}
metrics: {enabled: false}
"""


def perfkit(*args: str, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    """This checkout's perfkit, run from ``cwd`` (``-P``: not the perfkit of the directory it runs in)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-P", "-m", "perfkit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# -- the pieces ----------------------------------------------------------------------------------------
def test_sides_alternate_within_and_across_repeats():
    order = interleaved(2, 3)
    assert [s for _, _, s in order] == ["A", "B", "B", "A", "B", "A", "A", "B", "A", "B", "B", "A"]
    firsts = [s for i, (_, _, s) in enumerate(order) if i % 2 == 0]
    assert firsts.count("A") == firsts.count("B")   # neither side always goes first


@pytest.mark.parametrize("campaign", ["campaigns/perf-ci.yaml", "campaigns/sim.yaml"])
def test_each_unit_campaign_is_exactly_that_unit(campaign, tmp_path):
    c = load_campaign(ROOT / campaign)
    once = expand(dataclasses.replace(c, repeats=1))
    assert len(once) > 1 or campaign.endswith("perf-ci.yaml")
    for unit in once:
        raw = unit_mapping(c, unit)
        alone = expand(from_mapping(raw, text=yaml.safe_dump(raw), source=str(tmp_path / "u.yaml")))
        assert [(u.id, u.scenario, u.method) for u in alone] == [(unit.id, unit.scenario, unit.method)]


@pytest.mark.parametrize("ratios, verdict", [
    ([-0.50, -0.55, -0.45], "bad"),           # clearly slower than -20 %
    ([0.01, -0.02, 0.00], "good"),            # clearly not
    ([-0.50, 0.10, -0.20], "more"),           # across the threshold: measure again
    ([-0.50, -0.55], "more"),                 # fewer rounds than min_rounds
])
def test_a_step_decides_only_when_the_interval_clears_the_threshold(ratios, verdict):
    logs = [math.log1p(r) for r in ratios]
    assert decide(logs, 20.0, min_rounds=3, max_rounds=8)[0] == verdict


def test_an_undecided_step_is_skipped_at_the_budget():
    logs = [math.log1p(r) for r in (-0.5, 0.1, -0.2, 0.05)]
    assert decide(logs, 20.0, min_rounds=3, max_rounds=4)[0] == "skip"
    assert decide(logs, 20.0, min_rounds=3, max_rounds=5)[0] == "more"


def test_history_flags_a_change_beyond_both_commits_noise():
    pts = pd.DataFrame({"figure": ["f"] * 4, "position": [0, 1, 2, 3], "value_mpps": [1.0, 0.98, 0.5, 0.52],
                        "noise_pct": [5.0, 5.0, 5.0, 30.0]})
    out = _steps(pts.reindex(columns=[c for c in POINT_COLUMNS if c not in ("change_pct", "band_pct", "step")])
                 .fillna({"figure": "f"}).assign(**{k: pts[k] for k in pts}), 5.0)
    assert list(out["step"]) == [False, False, True, False]   # -2 %: noise; -49 %: a step; +4 % within 30 %
    assert out["change_pct"].iloc[2] == pytest.approx(-48.98, abs=0.01)


# -- ab end to end, on simulated DUTs --------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("perfci") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(repo)], check=True)
    return repo


@pytest.mark.slow   # builds two worktrees and runs perfkit in each: 30-70 s
def test_ab_of_a_revision_against_itself_is_no_change(sim_repo, tmp_path):
    campaign = tmp_path / "sim.yaml"
    campaign.write_text(SIM_CAMPAIGN)
    out, root = tmp_path / "out", tmp_path / "runs"
    res = perfkit("ab", "--base", "HEAD", "--head", "HEAD", "--repeats", "2", "--out", str(out), "--root", str(root),
                  "--json", str(campaign), cwd=sim_repo)
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["verdict"] == "no change beyond the noise"
    head = subprocess.run(["git", "-C", str(sim_repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert d["base"]["commit"] == d["head"]["commit"] == head
    # each side's units ran by its own perfkit, interleaved: A B, then B A
    assert [s for _, _, s in d["order"]] == ["base", "head", "head", "base"]
    comment = (out / "pr-comment.md").read_text()
    assert comment.startswith(COMMENT_MARKER) and "no change beyond the noise" in comment
    assert comment.count("`calib-64B-1flow-1core-w100`") == 1 and "DUT / DUT" in comment   # what limited it
    for png in ("ab-change.png", "ab-repeats.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for side in ("base", "head"):
        meta = json.loads((root / d[side]["run_id"] / "metadata.json").read_text())
        assert meta["perfkit"]["git_sha_full"] == head and meta["perfci"]["side"] == side
    # the worktrees are gone
    trees = subprocess.run(["git", "-C", str(sim_repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(trees.splitlines()) == 1
    # history finds both sides' runs under the one commit, with one figure and no step
    hist = perfkit("history", "perfci-sim", "--repo", str(sim_repo), "--root", str(root), "--out", str(tmp_path / "h"),
                   "--json", cwd=tmp_path)
    assert hist.returncode == 0, hist.stderr
    h = json.loads(hist.stdout)
    assert h["commits"] == [head] and [p["runs"] for p in h["points"]] == [2] and not h["steps"]
    assert (tmp_path / "h" / "history.png").read_bytes()[:4] == b"\x89PNG"
    # and the merged runs are ordinary runs: perfkit compare reads them
    cmp = perfkit("compare", "--run", d["head"]["run_id"], "--baseline", d["base"]["run_id"], "--root", str(root),
                  cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stderr


@pytest.mark.slow   # builds two worktrees and runs perfkit in each: 30-70 s
def test_sigterm_during_ab_removes_the_worktrees(sim_repo, tmp_path):
    campaign = tmp_path / "sim.yaml"
    campaign.write_text(SIM_CAMPAIGN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-P", "-m", "perfkit", "ab", "--base", "HEAD", "--head", "HEAD",
                              "--repeats", "5", "--out", str(tmp_path / "out"), "--root", str(tmp_path / "runs"),
                              str(campaign)], cwd=sim_repo, env=env, stderr=subprocess.PIPE, text=True)
    first = child.stderr.readline()   # "building base HEAD and head HEAD in worktrees under DIR"
    work = Path(first.rsplit(" ", 1)[1].strip())
    while not list(work.glob("runs/*/metadata.json")):   # a unit of a side is running or ran
        assert child.poll() is None, child.stderr.read()
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    rest = child.stderr.read()
    assert child.wait() == 130, rest
    assert "perfkit: interrupted" in rest
    assert not work.exists()
    trees = subprocess.run(["git", "-C", str(sim_repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(trees.splitlines()) == 1, trees


@pytest.mark.slow   # builds two worktrees and runs perfkit in each: 30-70 s
def test_a_side_that_does_not_build_is_one_line_naming_the_revision(sim_repo, tmp_path):
    repo = tmp_path / "broken"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(sim_repo), str(repo)], check=True)
    (repo / "bpf" / "bench.bpf.c").write_text("this is not C\n")
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit",
                    "--quiet", "-am", "Break the build"], check=True)
    campaign = tmp_path / "sim.yaml"
    campaign.write_text(SIM_CAMPAIGN)
    res = perfkit("ab", "--base", "HEAD", "--head", "HEAD~1", "--out", str(tmp_path / "out"), "--root",
                  str(tmp_path / "runs"), str(campaign), cwd=repo)
    assert res.returncode == 3
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("perfkit: error: base HEAD (") and "does not build: make bpf" in last
    assert len(subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True,
                              text=True).stdout.splitlines()) == 1


@pytest.mark.slow   # builds two worktrees and runs perfkit in each: 30-70 s
def test_ab_refuses_a_revision_that_is_not_one(sim_repo, tmp_path):
    res = perfkit("ab", "--base", "no-such-branch", "--head", "HEAD", "--root", str(tmp_path),
                  str(ROOT / "campaigns" / "perf-ci.yaml"), cwd=sim_repo)
    assert res.returncode == 2
    assert "--base: 'no-such-branch' is not allowed" in res.stderr


# -- the CI definitions ----------------------------------------------------------------------------------
def actionlint(path: Path) -> subprocess.CompletedProcess:
    if not ACTIONLINT.exists():
        pytest.fail(f"{ACTIONLINT} is missing: `make tools` installs it with Go (go install "
                    "github.com/rhysd/actionlint/cmd/actionlint); without Go the workflow cannot be checked")
    return subprocess.run([str(ACTIONLINT), "-config-file", str(ROOT / ".github" / "actionlint.yaml"), str(path)],
                          capture_output=True, text=True, cwd=ROOT)


def test_the_perf_workflow_passes_actionlint():
    res = actionlint(ROOT / ".github" / "workflows" / "perf.yml")
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    text = (ROOT / ".github" / "workflows" / "perf.yml").read_text()
    broken = tmp_path / "perf.yml"
    broken.write_text(text.replace("steps.ab.outputs.code", "steps.abb.outputs.code"))
    assert actionlint(broken).returncode != 0


def test_the_workflow_runs_ab_on_the_dut_runner_and_keeps_one_comment():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "perf.yml").read_text())
    assert "pull_request" in wf[True]   # YAML 1.1 reads the key `on` as True
    job = wf["jobs"]["ab"]
    assert job["runs-on"] == ["self-hosted", "linux", "perfkit-dut"]
    steps = {s.get("uses", s.get("name")).split("@")[0]: s for s in job["steps"]}
    run = "\n".join(s.get("run", "") for s in job["steps"])
    assert "perfkit ab --base" in run and "github.event.pull_request.base.sha" in str(steps)
    assert steps["actions/upload-artifact"]["with"]["path"] == "perf-out/"
    assert COMMENT_MARKER in steps["actions/github-script"]["with"]["script"]


def test_the_gitlab_job_has_what_it_needs():
    ci = yaml.safe_load((ROOT / ".gitlab-ci.yml").read_text())
    job = ci["perf-ab"]
    assert job["stage"] in ci["stages"]
    assert job["tags"] == ["perfkit-dut"]   # the self-hosted root runner (docs/ci.md)
    assert any("merge_request_event" in r.get("if", "") for r in job["rules"])
    assert job["variables"]["GIT_DEPTH"] == "0"
    script = "\n".join(job["script"])
    assert "make setup" in script and "perfkit ab" in script and "$CI_MERGE_REQUEST_DIFF_BASE_SHA" in script
    assert "python -m perfkit.perfci.gitlab_note perf-out/pr-comment.md" in script
    assert script.rstrip().endswith('exit "$(cat perf-out/exit-code)"')
    assert job["artifacts"]["when"] == "always" and job["artifacts"]["paths"] == ["perf-out/"]


def test_the_gitlab_note_updates_its_own_note(tmp_path):
    notes = [{"id": 1, "body": "LGTM"}, {"id": 7, "body": COMMENT_MARKER + "\nold"}]
    assert gitlab_note.find_note(notes) == 7 and gitlab_note.find_note(notes[:1]) is None
    assert gitlab_note.MARKER == COMMENT_MARKER
    log = tmp_path / "ab.log"
    log.write_text("building\nperfkit: error: head abc does not build: make bpf: error\n")
    body = gitlab_note.note_body(tmp_path / "missing.md", log, "3")
    assert body.startswith(COMMENT_MARKER) and "exit 3" in body and "does not build" in body


# -- the scratch repository on the real testbed ------------------------------------------------------------
@pytest.mark.slow
def test_ab_bisect_and_history_on_eight_commits(tmp_path):
    repo = tmp_path / "scratch"
    commits = scratch_repo(repo)
    planted = commits[PLANTED - 1]
    root, campaign = tmp_path / "runs", str(ROOT / "campaigns" / "perf-ci.yaml")

    slow = perfkit("ab", "--base", commits[PLANTED - 2], "--head", planted, "--out", str(tmp_path / "ab-slow"),
                   "--root", str(root), "--json", campaign, cwd=repo)
    assert slow.returncode == 1, slow.stderr
    d = json.loads(slow.stdout)
    assert d["verdict"] == "regression" and "calib-64B-1flow-1core-w200 max rate rx" in d["headline"]
    assert "slower beyond the noise" in (tmp_path / "ab-slow" / "pr-comment.md").read_text()

    same = perfkit("ab", "--base", commits[0], "--head", commits[0], "--out", str(tmp_path / "ab-same"),
                   "--root", str(root), "--json", campaign, cwd=repo)
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["verdict"] == "no change beyond the noise"

    # the planted commit halves the figure: a 30 % threshold lets a good step decide within a few
    # rounds of this VM's +-20 % noise between 1 s trials (20 % took up to --max-rounds per step)
    bis = perfkit("bisect", "--good", commits[0], "--bad", commits[-1], "--metric", "max", "--threshold", "30",
                  "--root", str(root), "--json", campaign, cwd=repo)
    assert bis.returncode == 0, bis.stderr
    b = json.loads(bis.stdout)
    assert b["first_bad"] == planted
    assert b["measured_steps"] <= math.ceil(math.log2(COMMITS)) + 1
    assert b["change_pct"] is None or b["change_pct"] < -30

    # history: ab's and bisect's runs, and one run of each commit they did not measure (each by its
    # own perfkit), gathered by commit; the step at the planted one
    from perfkit.perfci.history import run_commit
    from perfkit.perfci.session import Session
    from perfkit.perfci.sides import Side
    from perfkit.store import RunStore, list_runs
    measured = {run_commit(RunStore.open(r, root).metadata()) for r in list_runs(root)}
    assert {commits[0], commits[PLANTED - 2], planted} <= measured
    session = Session(load_campaign(campaign), tmp_path / "hist-work", say=lambda m: None)
    for c in [c for c in commits if c not in measured]:
        side = Side.build(repo, c, tmp_path / "trees", "h")
        try:
            side.run_unit(session.units[0].path, root)
        finally:
            side.close()
    hist = perfkit("history", "perf-ci", "--metric", "max", "--repo", str(repo), "--root", str(root), "--out",
                   str(tmp_path / "hist"), "--json", cwd=repo)
    assert hist.returncode == 0, hist.stderr
    h = json.loads(hist.stdout)
    assert set(commits) <= set(h["commits"])
    own = [p for p in h["points"] if p["commit"] in commits]
    assert [p["commit"] for p in own] == commits   # in commit order
    worst = min((p for p in own if p["change_pct"] is not None), key=lambda p: p["change_pct"])
    assert worst["commit"] == planted and worst["step"]
    assert (tmp_path / "hist" / "history.html").read_text().count("<img") == 1
