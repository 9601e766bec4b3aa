"""Dataplanes as installed plugins (issue 36, part 2): found through the entry-point group
``perfkit.dataplanes``, broken ones reported while the others load, and the conformance check.

The plugin is ``tests/data/plugins/perfkit-demo-plugin``: a package written against the public
interface only (no reference model; its own program, compiled on first use). The fast tests put it
on ``PYTHONPATH`` with its distribution metadata (what ``importlib.metadata`` reads of an installed
package); the slow one installs it with pip and runs a trial on the local testbed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from perfkit import conformance, dataplanes
from perfkit.cli.dataplanes import listing
from perfkit.dataplane import API_VERSION, NotProvided
from perfkit.errors import ConfigError
from tests.conftest import ROOT

PLUGIN = ROOT / "tests" / "data" / "plugins" / "perfkit-demo-plugin"
ENTRY_POINTS = """[perfkit.dataplanes]
demo = perfkit_demo:DATAPLANE
demowrong = perfkit_demo:WrongModel
demobroken = perfkit_demo.broken:DATAPLANE
demoold = perfkit_demo:OLD
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that holds the plugin as an installed package looks to importlib.metadata."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(PLUGIN / "perfkit_demo", site / "perfkit_demo")
    info = site / "perfkit_demo_plugin-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: perfkit-demo-plugin\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def _perfkit(*args: str, site: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
        env["PERFKIT_DEMO_CACHE"] = str(site / "cache")
    return subprocess.run([sys.executable, "-m", "perfkit", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=check)


def test_the_builtins_register_through_the_entry_point_group() -> None:
    origins = dataplanes.origins()
    for name in ("calib", "l4lb", "pgwu"):
        assert origins[name].distribution == "perfkit", "perfkit's own go through the same group"
        assert dataplanes.get(name).api_version == API_VERSION
    assert dataplanes.broken() == {}


@pytest.fixture
def on_path(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin on this process's ``sys.path``, found again by discovery; gone again afterwards."""
    monkeypatch.syspath_prepend(str(plugin_path))
    monkeypatch.setenv("PERFKIT_DEMO_CACHE", str(plugin_path / "cache"))
    dataplanes.refresh()
    yield plugin_path
    monkeypatch.undo()
    for mod in [m for m in sys.modules if m.startswith("perfkit_demo")]:
        del sys.modules[mod]
    dataplanes.refresh()


def test_broken_plugins_are_reported_and_the_others_still_load(on_path: Path) -> None:
    rows = {r["name"]: r for r in listing()}
    assert {"calib", "l4lb", "pgwu", "demo", "demowrong"} <= {n for n, r in rows.items() if not r["broken"]}
    assert "ImportError" in rows["demobroken"]["broken"] and "libdemo" in rows["demobroken"]["broken"]
    assert "API version 1" in rows["demoold"]["broken"] and f"version {API_VERSION}" in rows["demoold"]["broken"]
    demo = rows["demo"]
    assert (demo["distribution"], demo["version"]) == ("perfkit-demo-plugin", "0.3.0")
    assert demo["file"].startswith(str(on_path)) and demo["has_model"] is False
    with pytest.raises(ConfigError, match="demoold written for dataplane API version 1"):
        dataplanes.get("demoold")
    assert dataplanes.names() == tuple(sorted(dataplanes.names())) and "demobroken" not in dataplanes.names()


def test_a_model_is_optional(on_path: Path) -> None:
    dp = dataplanes.get("demo")
    assert not dp.has_model and not dp.has_bench and dataplanes.get("demowrong").has_model
    traffic = dp.traffic(64, 2, dp.validate({}))
    with pytest.raises(NotProvided, match="dataplane demo: no reference model"):
        dp.emit(traffic, traffic.packet(0))
    assert dp.output_check(traffic, traffic.packet(0)) is None
    assert traffic.output_frame_size == traffic.wire_frame_size == 64


def test_check_names_the_first_frame_a_wrong_model_gets_wrong(on_path: Path) -> None:
    bad = conformance.check(dataplanes.get("demowrong"))
    assert not bad.ok
    assert [c.line() for c in bad.checks if c.status == "FAIL"] == [
        "FAIL model [mode=fwd]: frame 2 (flow 2): the kernel says XDP_REDIRECT, the model XDP_DROP (drop)"]
    good = conformance.check(dataplanes.get("demo"))
    assert good.ok and {c.check: c.status for c in good.checks} == {
        "load": "PASS", "run": "PASS", "counters": "PASS", "model": "SKIP", "layouts": "PASS"}


@pytest.mark.slow
def test_the_commands_list_and_check_plugins(plugin_path: Path) -> None:
    rows = {r["name"]: r for r in json.loads(_perfkit("dataplanes", "--json", site=plugin_path).stdout)}
    assert rows["demobroken"]["broken"] and not rows["demo"]["broken"]
    bad = _perfkit("dataplane", "check", "demowrong", site=plugin_path, check=False)
    assert bad.returncode == 1 and "FAIL model [mode=fwd]: frame 2 (flow 2)" in bad.stdout
    refused = _perfkit("dataplane", "check", "demoold", site=plugin_path, check=False)
    assert refused.returncode == 2 and "API version 1" in refused.stderr and len(refused.stderr.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["calib", "l4lb", "pgwu"])
def test_check_passes_on_the_builtins(name: str) -> None:
    out = json.loads(_perfkit("dataplane", "check", name, "--json").stdout)
    assert out["ok"] and {c["status"] for c in out["checks"]} == {"PASS"}


@pytest.fixture
def installed() -> Iterator[None]:
    """The plugin installed into perfkit's environment with pip, uninstalled afterwards."""
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-deps", str(PLUGIN)], check=True)
    try:
        yield
    finally:
        subprocess.run([*pip, "uninstall", "-y", "perfkit-demo-plugin"], check=True)
        dataplanes.refresh()


@pytest.mark.slow
def test_an_installed_plugin_without_a_model_runs_a_trial(installed: None) -> None:
    out = _perfkit("trial", "--dataplane", "demo", "--frame-size", "64", "--rate", "10kpps", "--duration", "0.5",
                   "--json")
    d = json.loads(out.stdout)
    assert d["tx_packets"] > 0 and d["rx_packets"] == d["tx_packets"]
    assert any(n.startswith("output not checked: no model") for n in d["notes"])
    listing = {r["name"]: r for r in json.loads(_perfkit("dataplanes", "--json").stdout)}
    assert listing["demo"]["distribution"] == "perfkit-demo-plugin" and listing["demobroken"]["broken"]
