"""Performance CI of a user's own dataplane: ``--dataplane`` refusals, the sides, provenance, history.

Fast: on the scaffolded repository of ``perfkit/perfci/demorepo.py`` with real git worktrees and real
clang builds (a side is built, nothing measured), and on constructed metadata. Slow: ``perfkit ab``
of the planted commit (exit 1, perfkit the same on both sides) and ``perfkit bisect`` on the real
testbed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfkit.cli import main
from perfkit.errors import ConfigError
from perfkit.perfci.history import run_commit
from perfkit.perfci.sides import SideError
from perfkit.perfci.userside import DESCRIPTION as KIND_DESCRIPTION
from perfkit.perfci.userside import OWN, PLUGIN, DataplaneSide, build_side, side_campaign, side_kind
from perfkit.provenance import dataplane_source, file_sha256
from perfkit.trial import TrialResult
from perfkit.version import perfkit_version
from perfkit.perfci.demorepo import DESCRIPTION, PLANTED, demo_repo, git, plugin_repo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, list[str]]:
    """The demo repository with three commits, the second planted (map lookups per frame)."""
    d = tmp_path_factory.mktemp("user") / "repo"
    return d, demo_repo(d, commits=3, planted=2)


def cli(capsys, *args: str) -> tuple[int, str]:
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value,kind", [(None, OWN), ("calib", OWN), ("pgwu", OWN), ("demo.dataplane.yaml", KIND_DESCRIPTION),
                                        ("nf/lb.dataplane.yml", KIND_DESCRIPTION)])
def test_what_a_dataplane_option_asks_for(value, kind):
    assert side_kind(value) == kind


def test_a_plugin_s_name_is_a_side_of_ab_only():
    assert side_kind("mynf", plugins=True) == PLUGIN
    with pytest.raises(ConfigError, match="a description file's path relative to --repo"):
        side_kind("mynf")   # bisect: not yet


@pytest.mark.parametrize("value", ["xdp-lb", "/abs/demo.dataplane.yaml", "../other/demo.dataplane.yaml"])
def test_a_dataplane_that_is_no_file_of_the_repository_is_refused(value):
    with pytest.raises(ConfigError) as e:
        side_kind(value)
    assert e.value.field == "--dataplane" and str(value) in str(e.value)


@pytest.mark.parametrize("command", ["ab", "bisect"])
def test_the_commands_refuse_a_bad_dataplane_in_one_line(command, repo, capsys):
    d, ids = repo
    revs = ["--base", ids[0], "--head", ids[1]] if command == "ab" else ["--good", ids[0], "--bad", ids[1]]
    code, err = cli(capsys, command, "--repo", str(d), "--dataplane", "xdp-lb", *revs, str(d / "ab.yaml"))
    assert code == 2 and err.count("\n") == 1 and "--dataplane" in err and "xdp-lb" in err
    code, err = cli(capsys, command, "--repo", str(d), "--dataplane", "nonesuch.dataplane.yaml", *revs,
                    str(d / "ab.yaml"))
    assert code == 2 and err.count("\n") == 1 and "nonesuch.dataplane.yaml" in err


def test_the_campaign_measures_the_repository_s_description(repo):
    d, _ = repo
    c = side_campaign(d / "ab.yaml", d, DESCRIPTION)
    assert c.dataplane == str((d / DESCRIPTION).resolve())
    assert side_campaign(ROOT / "campaigns" / "perf-ci.yaml", ROOT, None).dataplane == "calib"


def test_a_side_is_the_revision_s_description_with_its_object_built(repo, tmp_path):
    d, ids = repo
    sides = [build_side(d, rev, tmp_path / "trees", name, "--base", DESCRIPTION)
             for name, rev in (("base", ids[0]), ("head", ids[2]))]
    try:
        a, b = sides
        assert isinstance(a, DataplaneSide) and a.commit == ids[0] and git(a.path, "rev-parse", "HEAD") == ids[0]
        assert a.object_sha256 and b.object_sha256 and a.object_sha256 != b.object_sha256   # the planted lookups
        unit = tmp_path / "unit000.yaml"
        unit.write_text(yaml.safe_dump({"name": "demo-ab", "dataplane": "/elsewhere/x.dataplane.yaml"}))
        assert yaml.safe_load(a.unit_file(unit).read_text())["dataplane"] == str(a.path / DESCRIPTION)
        assert a.facts()["object_sha256"] == a.object_sha256 and a.facts()["commit"] == ids[0]
    finally:
        for s in sides:
            s.close()
    assert not any(s.path.exists() for s in sides)


def test_a_revision_whose_object_does_not_build_is_one_line_naming_it(repo, tmp_path):
    d, ids = repo
    subprocess.run(["git", "-C", str(d), "checkout", "-q", "-b", "broken", ids[-1]], check=True)
    try:
        (d / "demo.bpf.c").write_text("this is not C\n")
        git(d, "commit", "-q", "-am", "Break the program")
        with pytest.raises(SideError) as e:
            build_side(d, "broken", tmp_path / "trees", "head", "--head", DESCRIPTION)
        assert "head broken" in str(e.value) and "does not build" in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(SideError, match="has no other.dataplane.yaml"):
            build_side(d, ids[0], tmp_path / "trees", "base", "--base", "other.dataplane.yaml")
    finally:
        subprocess.run(["git", "-C", str(d), "checkout", "-q", "master"], check=True)
    assert not list((tmp_path / "trees").iterdir())


def test_a_run_of_another_commit_or_perfkit_is_refused(repo, tmp_path):
    d, ids = repo
    side = DataplaneSide("base", ids[0], ids[0], d, d, description=DESCRIPTION)
    key = str((d / DESCRIPTION).resolve())
    mine = perfkit_version()["git_sha_full"]
    side.check_run({"perfkit": {"git_sha_full": mine}, "dataplanes": {key: {"commit": ids[0]}}})
    with pytest.raises(SideError, match="dataplane commit"):
        side.check_run({"perfkit": {"git_sha_full": mine}, "dataplanes": {key: {"commit": ids[1]}}})
    with pytest.raises(SideError, match="perfkit commit"):
        side.check_run({"perfkit": {"git_sha_full": "0" * 40}, "dataplanes": {key: {"commit": ids[0]}}})


def test_a_description_records_its_repository_commit_build_and_object(repo):
    d, ids = repo
    src = dataplane_source(str(d / DESCRIPTION))
    assert (src["repository"], src["commit"], src["dirty"], src["path"]) == (str(d), ids[-1], False, DESCRIPTION)
    assert src["build"].startswith("make ") and src["object_sha256"] == file_sha256(src["object"])
    text = (d / "NOTES.md").read_text()
    (d / "NOTES.md").write_text(text + "uncommitted\n")
    try:
        assert dataplane_source(str(d / DESCRIPTION))["dirty"] is True
    finally:
        (d / "NOTES.md").write_text(text)
    assert "commit" not in dataplane_source("calib")   # perfkit's own: the run's perfkit commit says it


def test_history_takes_a_user_dataplane_s_commit_and_perfkit_s_otherwise():
    pk = {"perfkit": {"git_sha_full": "p" * 40}}
    user = {**pk, "dataplanes": {"/w/demo.dataplane.yaml": {"file": "/w/demo.dataplane.yaml", "commit": "u" * 40}}}
    assert run_commit(user) == "u" * 40
    assert run_commit({**pk, "dataplanes": {"calib": {"module": "perfkit.dataplanes.calib"}}}) == "p" * 40
    assert run_commit({**pk, "dataplanes": {**user["dataplanes"], "calib": {"module": "m"}}}) == "p" * 40
    assert run_commit({**pk, "dataplanes": {"/x.dataplane.yaml": {"file": "/x.dataplane.yaml"}}}) == "p" * 40


def perfkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-P", "-m", "perfkit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow   # four 0.5 s max-rate units, each a perfkit run: about 50 s
def test_ab_of_the_planted_commit_is_a_regression_measured_by_one_perfkit(repo, tmp_path):
    d, ids = repo
    # three repeats a side: from two, one 0.5 s max rate cut by a host stall made the noise band
    # 87 % in CI (change -81 %: "within noise")
    res = perfkit("ab", "--repo", ".", "--dataplane", DESCRIPTION, "--base", ids[0], "--head", ids[2], "--repeats", "3",
                  "--out", str(tmp_path / "out"), "--root", str(tmp_path / "runs"), "--json", "ab.yaml", cwd=d)
    # the verdict's rows (figures, change, noise band) with it: a clean-clone CI run once found no
    # regression, and its stderr alone did not say why
    assert res.returncode == 1, res.stderr + res.stdout[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdict"] == "regression" and summary["perfkit"]["same_on_both_sides"]
    assert summary["perfkit"]["commits"] == [perfkit_version()["git_sha_full"]] * 2
    assert [summary[s]["dataplane"]["commit"] for s in ("base", "head")] == [ids[0], ids[2]]
    comment = (tmp_path / "out" / "pr-comment.md").read_text()
    assert "max rate rx" in comment and "slower beyond the noise" in comment and "same on both sides" in comment
    # issue 39: the regressed scenario's functions that moved most, the program's own first
    moved = [line for line in comment.splitlines() if "moved most" in line]
    assert len(moved) == 1 and "xdp_demo" in moved[0].split(":", 2)[2].split(",")[0], comment
    for side in ("base", "head"):
        meta = json.loads((tmp_path / "runs" / summary[side]["run_id"] / "metadata.json").read_text())
        assert run_commit(meta) == summary[side]["commit"]


# Threshold 30 %: the planted commit costs -86 %, while this VM's max rate moves by +-20 % from one
# 0.5 s run to the next, so that at the default 10 % a commit that changed nothing stayed undecided
# after 8 rounds (95 % CI [-14.8, +14.2] %, CI of 2026-12-02) and bisect had to skip it.
@pytest.mark.slow   # two measured steps of at least 2 rounds: about 90 s
def test_bisect_finds_the_planted_commit_of_the_user_s_repository(tmp_path):
    d = tmp_path / "repo"
    ids = demo_repo(d, commits=4, planted=2)
    res = perfkit("bisect", "--repo", ".", "--dataplane", DESCRIPTION, "--good", ids[0], "--bad", ids[-1],
                  "--threshold", "30", "--min-rounds", "2", "--root", str(tmp_path / "runs"), "--json", "ab.yaml",
                  cwd=d)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["first_bad"] == ids[2] and out["measured_steps"] <= 3
    assert PLANTED == 5   # the eight-commit repository of the bench plants the fifth


def test_a_trial_of_a_description_records_its_commit(repo):
    d, ids = repo
    sc = side_campaign(d / "ab.yaml", d, DESCRIPTION).scenarios()[0]
    trial = TrialResult.for_scenario(sc, wire_frame_size=64, generator="sim", duration=1.0, intended_pps=1e6,
                                     intended_packets=1_000_000, tx_packets=1_000_000, rx_packets=1_000_000)
    assert trial.dataplane_source == {"repository": str(d), "commit": ids[-1], "dirty": False, "path": DESCRIPTION}
    assert json.loads(trial.to_record()["dataplane_source"])["commit"] == ids[-1]
    assert TrialResult.from_record(trial.to_record()).dataplane_source == trial.dataplane_source


@pytest.mark.slow   # two pip installs and four 0.5 s max-rate units: about 2 min
def test_ab_of_a_plugin_package_installs_each_revision_apart(tmp_path):
    d = tmp_path / "abplug"
    ids = plugin_repo(d, "abplug")
    res = perfkit("ab", "--repo", ".", "--dataplane", "abplug", "--base", ids[0], "--head", ids[1], "--repeats", "2",
                  "--out", str(tmp_path / "out"), "--root", str(tmp_path / "runs"), "--json", "ab.yaml", cwd=d)
    # the verdict's rows (figures, change, noise band) with it: a clean-clone CI run once found no
    # regression, and its stderr alone did not say why
    assert res.returncode == 1, res.stderr + res.stdout[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdict"] == "regression" and summary["perfkit"]["same_on_both_sides"]
    for side, commit in zip(("base", "head"), ids):
        facts = summary[side]["dataplane"]
        assert (facts["plugin"], facts["package"], facts["commit"]) == ("abplug", "abplug==0.1.0", commit)
        meta = json.loads((tmp_path / "runs" / summary[side]["run_id"] / "metadata.json").read_text())
        source = meta["dataplanes"]["abplug"]
        assert source["package"] == "abplug==0.1.0" and source["file"].startswith(facts["environment"])
    assert "Plugin `abplug` installed" in (tmp_path / "out" / "pr-comment.md").read_text()
    assert not Path(summary["base"]["dataplane"]["environment"]).exists(), "the side environments are removed"
