"""``perfkit dataplane new``: the project it writes builds, its own tests pass (BPF_PROG_TEST_RUN
against its model), and (slow) ``perfkit run campaign.yaml --report`` renders every page."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perfkit.cli import main


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = tmp_path_factory.mktemp("scaffold") / "demo"
    assert main(["dataplane", "new", "demo", "--dir", str(d)]) == 0
    return d


def test_the_project_builds_and_its_tests_pass(project):
    assert subprocess.run(["git", "-C", str(project), "log", "--oneline"], capture_output=True, text=True,
                          check=True).stdout.count("\n") == 1
    subprocess.run(["make", "-s"], cwd=project, check=True)
    assert (project / "demo.o").is_file()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                          capture_output=True, text=True, env={**os.environ, "PERFKIT_CACHE": str(project / ".cache")})
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 passed" in proc.stdout


@pytest.mark.parametrize("name, where, message", [
    ("1x", "new", "NAME: '1x'"), ("My-NF", "new", "NAME: 'My-NF'"), ("demo", "full", "--dir: ")])
def test_refusals_are_one_line_exit_2(tmp_path, capsys, name, where, message):
    d = tmp_path / "p"
    if where == "full":
        d.mkdir()
        (d / "x").write_text("")
    assert main(["dataplane", "new", name, "--dir", str(d)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow
def test_perfkit_run_renders_every_page(project, tmp_path):
    """Needs XDP_TX output on the testbed (branch verdicts)."""
    from perfkit.report import PAGES
    env = {**os.environ, "PERFKIT_CACHE": str(project / ".cache")}
    proc = subprocess.run([sys.executable, "-m", "perfkit", "run", "campaign.yaml", "--report", "--json",
                           "--no-progress", "--no-metrics", "--root", str(tmp_path / "runs"),
                           "--reports", str(tmp_path / "reports")], cwd=project, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["report_ok"]
    for page in PAGES:
        assert any((tmp_path / "reports").rglob(f"{page.name}.html")), page.name
