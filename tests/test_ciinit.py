"""``perfkit ci init``: the CI file it writes into a user's repository, and what it refuses.

Each test makes a scratch git repository holding a dataplane description and a campaign, runs
``perfkit ci init`` in-process, and checks the file: the GitHub workflow through the real actionlint
(``make tools``; a broken copy shows that the check can fail), the GitLab job for what it must hold.
Slow: the jobs' shell scripts run by bash with the real perfkit (ab's status kept, the comment or
note made from its log).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfkit.cli import build_parser, main
from perfkit.errors import ConfigError
from perfkit.perfci.cifiles import default_perfkit_spec, write_ci
from perfkit.perfci.comment import COMMENT_MARKER
from tests.test_perfci import ACTIONLINT, ROOT

DESCRIPTION = "lb/lb.dataplane.yaml"
TESTBED_LOCK = "/tmp/perfkit-testbed.lock"
CAMPAIGN = "campaign.yaml"


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with a dataplane description (in a subdirectory) and a campaign file."""
    r = tmp_path / "their-repo"
    (r / "lb").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    (r / DESCRIPTION).write_text("name: lb\n")
    (r / CAMPAIGN).write_text("name: lb-ci\n")
    return r


def ci_init(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["ci", "init", *args])
    except SystemExit as e:   # argparse's refusals exit
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def lint(repo: Path) -> subprocess.CompletedProcess:
    """actionlint as a user runs it at the top of their repository (it reads .github/actionlint.yaml)."""
    if not ACTIONLINT.exists():
        pytest.fail(f"{ACTIONLINT} is missing: `make tools` installs it with Go")
    return subprocess.run([str(ACTIONLINT)], cwd=repo, capture_output=True, text=True)


def shell_lines(script: str) -> list[str]:
    """A script's commands, continuation lines joined."""
    return script.replace("\\\n", " ").splitlines()


def ab_words(script: str) -> list[str]:
    """The ``perfkit ab`` command of a script, as the shell splits it (from ``ab`` to the redirection)."""
    (line,) = [ln for ln in shell_lines(script) if "/bin/perfkit\" ab " in ln]
    words = shlex.split(line.split(" > ")[0])
    return words[words.index("ab"):]


def test_the_github_workflow_passes_actionlint_in_their_repository(repo, capsys):
    code, out, err = ci_init(capsys, "--github", "--dir", str(repo / "lb"), "--json")
    assert code == 0, err
    d = json.loads(out)
    wf_path = repo / ".github" / "workflows" / "perfkit-ab.yml"
    assert d["path"] == str(wf_path) and d["repo"] == str(repo)   # --dir in a subdirectory: the repository's top
    assert d["dataplane"] == DESCRIPTION and d["perfkit_spec"] == default_perfkit_spec()
    assert d["lint_config"] == ".github/actionlint.yaml" and d["lint_config_written"]
    res = lint(repo)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
    wf = yaml.safe_load(wf_path.read_text())
    assert wf[True]["pull_request"]   # YAML 1.1 reads the key `on` as True
    job = wf["jobs"]["ab"]
    assert job["runs-on"] == ["self-hosted", "linux", "perfkit-dut"]
    run = "\n".join(s.get("run", "") for s in job["steps"])
    assert ab_words(run) == ["ab", "--repo", ".", "--dataplane", DESCRIPTION, "--base", "$BASE_SHA", "--head",
                             "$HEAD_SHA", "--out", "perf-out", "--root", "/var/lib/perfkit/runs", "--json", CAMPAIGN]
    steps = {s.get("uses", s.get("name")).split("@")[0]: s for s in job["steps"]}
    assert steps["perfkit ab, head vs base"]["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    assert steps["actions/checkout"]["with"]["fetch-depth"] == 0
    assert steps["actions/upload-artifact"]["with"]["path"] == "perf-out/"
    script = steps["actions/github-script"]["with"]["script"]
    assert f"const marker = '{COMMENT_MARKER}'" in script and "updateComment" in script and "createComment" in script


def test_actionlint_fails_a_broken_copy_of_the_workflow(repo, capsys):
    assert ci_init(capsys, "--github", "--dir", str(repo))[0] == 0
    wf = repo / ".github" / "workflows" / "perfkit-ab.yml"
    good = wf.read_text()
    wf.write_text(good.replace("steps.ab.outputs.code", "steps.abb.outputs.code"))
    assert lint(repo).returncode != 0
    # and the label: a runner label actionlint's configuration does not name
    wf.write_text(good.replace("linux, perfkit-dut]", "linux, perfkit-dvt]"))
    res = lint(repo)
    assert res.returncode != 0 and "perfkit-dvt" in res.stdout


def test_the_gitlab_job_runs_ab_on_merge_requests_and_updates_one_note(repo, capsys):
    spec = "perfkit @ git+https://example.org/perfkit@0123abc"
    code, out, err = ci_init(capsys, "--gitlab", "--dir", str(repo), "--perfkit-spec", spec, "--label", "dut-7",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["lint_config"] is None
    ci = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    job = ci["perfkit-ab"]
    assert job["stage"] in ci["stages"] and job["tags"] == ["dut-7"]
    assert any('$CI_PIPELINE_SOURCE == "merge_request_event"' == r.get("if") for r in job["rules"])
    assert job["variables"]["GIT_DEPTH"] == "0"
    script = "\n".join(job["script"])
    (pip,) = [ln for ln in shell_lines(script) if "pip install" in ln]
    assert shlex.split(pip)[-1] == spec   # one word for pip, however it is spelt
    assert ab_words(script) == ["ab", "--repo", ".", "--dataplane", DESCRIPTION, "--base",
                                "$CI_MERGE_REQUEST_DIFF_BASE_SHA", "--head", "$CI_COMMIT_SHA", "--out", "perf-out",
                                "--root", "/var/lib/perfkit/runs", "--json", CAMPAIGN]
    (note,) = [ln for ln in shell_lines(script) if "gitlab_note" in ln]
    module = shlex.split(note)[2]
    assert shlex.split(note)[1:3] == ["-m", "perfkit.perfci.gitlab_note"] and importlib.util.find_spec(module)
    assert script.rstrip().endswith('exit "$(cat perf-out/exit-code)"')
    assert job["artifacts"]["when"] == "always" and job["artifacts"]["paths"] == ["perf-out/"]


def test_the_ab_command_is_one_perfkit_ab_takes(repo):
    """The generated command, through perfkit's own parser, once ``ab`` takes ``--dataplane``."""
    ab = build_parser()._subparsers._group_actions[0].choices["ab"]
    if not any("--dataplane" in a.option_strings for a in ab._actions):
        pytest.skip("perfkit ab takes no --dataplane yet")
    write_ci("github", repo)
    wf = yaml.safe_load((repo / ".github" / "workflows" / "perfkit-ab.yml").read_text())
    args = build_parser().parse_args(ab_words("\n".join(s.get("run", "") for s in wf["jobs"]["ab"]["steps"])))
    assert isinstance(args, argparse.Namespace) and args.command == "ab"


def test_a_plugin_name_or_another_description_file(repo, capsys):
    (repo / "other.dataplane.yaml").write_text("name: other\n")
    code, _, err = ci_init(capsys, "--github", "--dir", str(repo))   # two descriptions: which one?
    assert code == 2 and err.count("\n") == 1 and "--dataplane" in err and DESCRIPTION in err
    assert ci_init(capsys, "--github", "--dir", str(repo), "--dataplane", "other.dataplane.yaml")[0] == 0
    assert "--dataplane other.dataplane.yaml " in (repo / ".github" / "workflows" / "perfkit-ab.yml").read_text()
    assert ci_init(capsys, "--gitlab", "--dir", str(repo), "--dataplane", "xdp-lb")[0] == 0
    assert "--dataplane xdp-lb " in (repo / ".gitlab-ci.yml").read_text()


@pytest.mark.parametrize("args, field", [
    (["--bitbucket"], "--github --gitlab"),                           # no such provider
    (["--github", "--dataplane", "nonesuch.dataplane.yaml"], "--dataplane"),
    (["--github", "--dataplane", "lb; rm -rf /"], "--dataplane"),
    (["--github", "--campaign", "nonesuch.yaml"], "--campaign"),
    (["--github", "--campaign", "/etc/hostname"], "--campaign"),      # outside the repository
    (["--github", "--label", "perfkit dut"], "--label"),
    (["--github", "--perfkit-spec", "perfkit\nrm -rf /"], "--perfkit-spec"),
])
def test_bad_input_is_one_line_naming_the_option(repo, capsys, args, field):
    code, out, err = ci_init(capsys, "--dir", str(repo), *args)
    assert code == 2 and not out and err.count("\n") == 1 and field in err, err
    assert not (repo / ".github").exists() and not (repo / ".gitlab-ci.yml").exists()


def test_a_directory_that_is_no_git_repository_is_refused(tmp_path, capsys):
    code, _, err = ci_init(capsys, "--gitlab", "--dir", str(tmp_path))
    assert code == 2 and err == f"perfkit: error: --dir: '{tmp_path}' is not allowed; allowed: a directory in a git repository\n"
    assert not (tmp_path / ".gitlab-ci.yml").exists()


def test_an_unknown_provider_is_refused_by_the_api(repo):
    with pytest.raises(ConfigError, match="provider: 'bitbucket' is not allowed; allowed: github, gitlab"):
        write_ci("bitbucket", repo)


def test_an_existing_file_is_kept_unless_forced(repo, capsys):
    mine = "stages: [build]\n"
    (repo / ".gitlab-ci.yml").write_text(mine)
    code, _, err = ci_init(capsys, "--gitlab", "--dir", str(repo))
    assert code == 2 and err.count("\n") == 1 and "--force" in err and ".gitlab-ci.yml" in err
    assert (repo / ".gitlab-ci.yml").read_text() == mine
    code, out, _ = ci_init(capsys, "--gitlab", "--dir", str(repo), "--force", "--json")
    assert code == 0 and json.loads(out)["replaced"] and "perfkit-ab" in yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    # --path puts it beside theirs, for an include:
    (repo / ".gitlab-ci.yml").write_text(mine)
    assert ci_init(capsys, "--gitlab", "--dir", str(repo), "--path", ".gitlab/perfkit-ab.yml")[0] == 0
    assert (repo / ".gitlab-ci.yml").read_text() == mine and (repo / ".gitlab" / "perfkit-ab.yml").is_file()


# -- the jobs' shell, run by bash with the real perfkit -------------------------------------------------
def runner_venv(where: Path) -> Path:
    """The job's perfkit virtualenv, standing in for its ``pip install``: this environment's python and
    perfkit, running this checkout's perfkit."""
    bin_ = where / "bin"
    bin_.mkdir(parents=True)
    python = Path(sys.executable)
    for name, argv in (("python", f'"{python}"'), ("perfkit", f'"{python}" -P -m perfkit')):
        (bin_ / name).write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec {argv} "$@"\n')
        (bin_ / name).chmod(0o755)
    return where


@pytest.mark.slow   # a perfkit process: 4 s of CPU, 10-40 s on the shared VM
def test_the_github_ab_step_runs_and_leaves_a_comment_whatever_ab_says(repo, capsys, tmp_path):
    """The step's script under bash as GitHub runs it: ab's exit status goes to the step's output, and
    without a pr-comment.md of ab's the comment is its log's tail, with the marker."""
    assert ci_init(capsys, "--github", "--dir", str(repo))[0] == 0
    wf = yaml.safe_load((repo / ".github" / "workflows" / "perfkit-ab.yml").read_text())
    step = next(s for s in wf["jobs"]["ab"]["steps"] if s.get("id") == "ab")
    runner_temp = tmp_path / "runner-temp"
    runner_venv(runner_temp / "perfkit-venv")
    output = tmp_path / "github-output"
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "GITHUB_OUTPUT": str(output), "BASE_SHA": "0" * 40,
           "HEAD_SHA": "0" * 40}
    run = step["run"].replace(TESTBED_LOCK, str(tmp_path / "lock"))   # not the machine's testbed, which others wait for
    res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr   # the step itself succeeds; the last step fails the job
    assert run != step["run"]
    (line,) = output.read_text().splitlines()
    code = int(line.removeprefix("code="))
    assert code == 2   # no such commits (or, today, no --dataplane): bad input
    comment = (repo / "perf-out" / "pr-comment.md").read_text()
    assert comment.startswith(COMMENT_MARKER) and f"no result (exit {code})" in comment
    assert "perfkit: error:" in comment   # ab's one line, from its log


@pytest.mark.slow   # two perfkit processes (ab, the note)
def test_the_gitlab_script_runs_and_exits_with_ab_s_status(repo, capsys, tmp_path):
    """The job's script from ``mkdir`` on, under bash with errexit as GitLab's shell executor runs it:
    ab's status is kept, the note is attempted (no token here: it says so) and the job exits with it."""
    assert ci_init(capsys, "--gitlab", "--dir", str(repo))[0] == 0
    script = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())["perfkit-ab"]["script"]
    lines = script[[i for i, s in enumerate(script) if s.startswith("mkdir")][0]:]
    venv = runner_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PERF_NOTE_TOKEN"}
    env.update(PERFKIT_VENV=str(venv), CI_MERGE_REQUEST_DIFF_BASE_SHA="0" * 40, CI_COMMIT_SHA="0" * 40)
    run = "\n".join(lines).replace(TESTBED_LOCK, str(tmp_path / "lock"))
    assert run != "\n".join(lines)
    res = subprocess.run(["bash", "-e", "-c", run], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2 == int((repo / "perf-out" / "exit-code").read_text()), res.stderr
    assert "PERF_NOTE_TOKEN is not set" in res.stdout and "perfkit: error:" in res.stdout   # the log, then the note
