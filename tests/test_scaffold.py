"""``perfkit dataplane new``: the project it writes builds, its own tests pass (BPF_PROG_TEST_RUN
against its model), and (slow) ``perfkit run campaign.yaml --report`` renders every page. With
``--plugin`` (slow): ``make`` installs the package into this environment (pip install -e), perfkit
finds it through its entry point, ``perfkit dataplane check`` passes on its model, its tests pass, a
trial and the campaign run; it is uninstalled again afterwards, leaving the environment as it was."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Iterator

import pytest

from perfkit import dataplanes
from perfkit.cli import main

PLUGIN = "pkscaffoldplug"


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


def test_plugin_writes_a_package_with_its_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / PLUGIN
    assert main(["dataplane", "new", PLUGIN, "--dir", str(d), "--plugin"]) == 0
    assert "a plugin package" in capsys.readouterr().out
    meta = tomllib.loads((d / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["perfkit.dataplanes"] == {PLUGIN: f"{PLUGIN}.dataplane:DATAPLANE"}
    assert (d / PLUGIN / f"{PLUGIN}.bpf.c").is_file() and not (d / f"{PLUGIN}.dataplane.yaml").exists()
    assert f"dataplane: {PLUGIN}\n" in (d / "campaign.yaml").read_text()
    # make installs into the Python of the first perfkit on PATH (its script's #! line)
    bindir = Path(sys.executable).parent
    shebang = (bindir / "perfkit").read_text().splitlines()[0].removeprefix("#!")
    dry = subprocess.run(["make", "--no-print-directory", "-n", "install"], cwd=d, capture_output=True, text=True,
                         check=True, env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    assert dry.stdout.split()[:4] == [shebang, "-m", "pip", "install"]


def _site() -> list[str]:
    return sorted(os.listdir(sysconfig.get_paths()["purelib"]))


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The --plugin project, installed into this environment by its own ``make``; uninstalled afterwards."""
    d = tmp_path_factory.mktemp("plugin") / PLUGIN
    assert main(["dataplane", "new", PLUGIN, "--dir", str(d), "--plugin"]) == 0
    before = _site()
    try:
        subprocess.run(["make", "-s", f"PYTHON={sys.executable}"], cwd=d, check=True, capture_output=True)
        yield d
    finally:
        subprocess.run(["make", "-s", "uninstall", f"PYTHON={sys.executable}"], cwd=d, check=True)
        dataplanes.refresh()
        assert _site() == before, "the environment is left as it was"


def _perfkit(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfkit", *args], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "PERFKIT_CACHE": str(project / ".cache")})


@pytest.mark.slow
def test_the_plugin_project_installs_conforms_and_runs_a_trial(plugin: Path, tmp_path: Path) -> None:
    assert (plugin / PLUGIN / "build").is_dir(), "make compiled the program"
    check = _perfkit(plugin, "dataplane", "check", PLUGIN)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "PASS model [defaults]: 4 frames as the model says" in check.stdout
    assert "PASS layouts" in check.stdout
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=plugin,
                           capture_output=True, text=True)
    assert tests.returncode == 0 and "4 passed" in tests.stdout, tests.stdout[-2000:]
    trial = _perfkit(plugin, "trial", "--dataplane", PLUGIN, "--rate", "5kpps", "--duration", "0.5", "--json")
    assert trial.returncode == 0, trial.stderr[-2000:]
    t = json.loads(trial.stdout)
    assert t["rx_packets"] == t["tx_packets"] > 0 and t["verdicts"] == {"XDP_TX": t["tx_packets"]}
    assert t["mismatched_packets"] == 0 and not any(n.startswith("output not checked") for n in t["notes"])
    assert t["dataplane_source"]["package"] == f"{PLUGIN}==0.1.0"


@pytest.mark.slow
def test_the_plugin_projects_campaign_runs(plugin: Path, tmp_path: Path) -> None:
    run = _perfkit(plugin, "run", "campaign.yaml", "--json", "--no-progress", "--no-metrics",
                   "--root", str(tmp_path / "runs"))
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["status"] == "complete" and out["units_done"] == out["units_total"] == 4
