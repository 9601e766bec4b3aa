"""The experiment notebook (notebooks/experiment.ipynb), its package (perfkit/experiment/) and the
campaign edits of ``perfkit experiment FILE -p KEY=VALUE`` (perfkit/campaign/edit.py).

- its parameters are ``campaign`` (a campaign file's keys) and the run parameters, in the words of
  ``perfkit experiment``'s options; every shipped campaign, as that mapping, is the same campaign
  (``make run`` runs campaigns/default.yaml through the notebook), through papermill's injection and
  the run's stored text; its own default campaign says only what the schema has no default for;
- ``-p KEY=VALUE`` edits nested keys and list items; a key the schema does not have, or a bad value,
  is refused before any kernel starts, in one line naming the key, the value and what is allowed;
- the runner resumes an experiment only with the campaign it started with;
- papermill executes the notebook end to end on a simulated DUT with a real Prometheus, Pushgateway
  and node-exporter: trials in the store and pushed, CPU pulled back, models and figures saved, the
  executed notebook kept with the run, and the report set written with the experiment's page.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import inspect
import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import numpy as np
import papermill
import pytest
import requests
import yaml
from papermill.translators import translate_parameters
from PIL import Image

from perfkit import experiment as ex
from perfkit.campaign import from_mapping, load_campaign
from perfkit.campaign.edit import apply_edits, parse_edits
from perfkit.campaign.schema import DEFAULTS, REQUIRED, load_mapping
from perfkit.cli import build_parser, main
from perfkit.errors import ConfigError, StoreError
from perfkit.metrics.query import pushed_trials_frame
from perfkit.report import build_report
from perfkit.scenario import FRAME_MAX
from perfkit.store import RunStore
from tests.conftest import ROOT
from tests.metrics_fixtures import metrics_stack  # noqa: F401 - a fixture

CAMPAIGNS = sorted((ROOT / "campaigns").glob("*.yaml"))
IMG_RE = re.compile(r'<img[^>]+src="data:image/png;base64,([A-Za-z0-9+/=\s]+)"')


def _comparable(campaign) -> dict:
    d = campaign.to_dict()
    d.pop("source")
    return d


def _parameters_cell() -> str:
    nb = nbformat.read(ex.NOTEBOOK, as_version=4)
    return next(c for c in nb.cells if "parameters" in c.metadata.get("tags", [])).source


# -- the notebook's parameters ----------------------------------------------------------------------
def test_the_notebooks_parameters_are_the_campaign_and_the_run_parameters():
    assert list(papermill.inspect_notebook(str(ex.NOTEBOOK))) == ["campaign", *ex.RUN_PARAMETERS]
    nb = nbformat.read(ex.NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "notebook outputs are never committed"
            # only calls into perfkit: no function, class, loop or handler tests could not reach
            kinds = {type(n).__name__ for n in ast.walk(ast.parse(cell.source))}
            assert not kinds & {"FunctionDef", "Lambda", "ClassDef", "For", "While", "Try", "With"}, cell.source


def test_the_notebooks_campaign_holds_only_what_the_schema_has_no_default_for():
    own = ex.default_campaign()
    assert set(own) == set(REQUIRED) and not set(own) & set(DEFAULTS)
    campaign = ex.check(own, cpus=2)           # a valid campaign on the local testbed
    assert campaign.generator.backend == "xdp" and campaign.dut_cores == (1,)
    assert list(campaign.flows) == DEFAULTS["flows"] and campaign.name == "experiment"


def test_the_run_parameters_say_what_perfkit_experiments_options_say():
    """The notebook's comments, ``perfkit experiment --help`` and the Python entry point use the same
    words: a run parameter is an option (``progress`` is ``--no-progress``)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["experiment"]
    helps = {a.dest: a.help for a in sub._actions}
    comments = dict(re.findall(r"^(\w+) = .*?# (.*)$", _parameters_cell(), re.M))
    option = {"run_id": "run", "resume": "resume", "root": "root", "progress": "no_progress", "report": "report",
              "reports": "reports"}
    for name in ex.RUN_PARAMETERS:
        said = helps[option[name]].split(" (default")[0].removeprefix("no ")
        assert comments[name].startswith(said), (name, comments[name], said)
    keywords = set(inspect.signature(ex.run_notebook).parameters)
    assert keywords == {"campaign", "edits", "baseline", *ex.RUN_PARAMETERS}
    assert set(inspect.signature(ex.run).parameters) - {"campaign", "say"} <= set(ex.RUN_PARAMETERS)


# -- campaigns as the notebook's parameter ------------------------------------------------------------
@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.name)
def test_every_shipped_campaign_is_the_same_campaign_as_the_notebooks_parameter(path):
    mapping = load_mapping(path.read_text(), str(path))
    # what papermill injects is that mapping again
    injected: dict = {}
    exec(translate_parameters("python", "python", {"campaign": mapping}, "injected"), injected)  # noqa: S102
    assert injected["campaign"] == mapping
    campaign = ex.check(injected["campaign"], cpus=2)
    assert _comparable(campaign) == _comparable(load_campaign(path, cpus=2))
    # the text the run keeps is the same campaign (a resume parses it)
    again = from_mapping(load_mapping(campaign.text, ex.SOURCE), source=ex.SOURCE, cpus=2)
    assert _comparable(again) == _comparable(campaign)


def test_a_campaign_without_a_name_is_named_after_its_file(tmp_path):
    raw = yaml.safe_load((ROOT / "campaigns" / "smoke.yaml").read_text())
    del raw["name"]
    path = tmp_path / "unnamed.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_mapping(path.read_text(), str(path))["name"] == "unnamed"
    assert ex.check(load_mapping(path.read_text(), str(path)), cpus=2).name == load_campaign(path).name


# -- edits: -p KEY=VALUE ------------------------------------------------------------------------------
@pytest.mark.parametrize("campaign, message", [
    ({"frame_sizes": [64, 9]}, f"campaign.frame_sizes[1]: 9 is not allowed; allowed: 64 .. {FRAME_MAX}"),
    ({"frame_sizes": 64}, "campaign.frame_sizes: 64 is not allowed; allowed: a non-empty list"),
    ({"generator": "nope"}, "campaign.generator.backend: 'nope' is not allowed; allowed: xdp, trex, sim"),
    ({"generator": {"options": {"colour": 1}}}, "campaign.generator.options.colour: 1 is not allowed; allowed: "
                                                "options of the xdp"),
    ({"params": {"colour": 1}}, "campaign.params.colour: 1 is not allowed; allowed: no such key; keys of "
                                "campaign.params:"),
    ({"methods": [{"method": "maxrate", "params": {"duration": -1}}]},
     "campaign.methods[0].params.duration: -1 is not allowed; allowed: a positive number [s]"),
    ({"repeats": True}, "campaign.repeats: True is not allowed; allowed: an integer, 1 .. 100"),
    ({"generator": {"options": {"trex_profile": "missing.py"}}},
     "campaign.generator.options.trex_profile: 'missing.py' is not allowed; allowed: the path of an existing TRex"),
    ({"generator": {"options": {"trex_profile": "trex_profiles/pgwu.py", "trex_tunables": ["--flows"]}}},
     "campaign.generator.options.trex_tunables: '--flows' is not allowed; allowed: KEY=VALUE"),
    ({"generator": {"options": {"trex_tunables": ["flows=1"]}}},
     "campaign.generator.options.trex_tunables: ['flows=1'] is not allowed; allowed: only with trex_profile"),
    ({"generator": "trex"}, "campaign.dut_cores: 'auto' is not allowed; allowed: a list of core counts"),
    ({"metrics": {"prometheus": "x"}}, "campaign.metrics.prometheus: 'x' is not allowed; allowed: no such key"),
])
def test_a_bad_campaign_names_the_key(campaign, message):
    base = {"frame_sizes": [64], "methods": ["maxrate"]}
    with pytest.raises(ConfigError) as err:
        ex.check({**base, **campaign}, cpus=2)
    assert str(err.value).startswith(message), str(err.value)


def test_a_trex_profile_and_a_lab_server_are_generator_options():
    profile = {"frame_sizes": [64], "methods": ["maxrate"], "flows": [1000],
               "generator": {"options": {"trex_profile": "trex_profiles/pgwu.py", "trex_tunables": ["flows=1000"]}}}
    assert ex.check(profile, cpus=2).generator.options == profile["generator"]["options"]
    lab = apply_edits({"frame_sizes": [64], "methods": ["maxrate"]},
                      {"generator": "trex", "generator.options.server": "198.18.0.2", "dut_cores": [4]})
    assert from_mapping(lab, cpus=2).generator.options == {"server": "198.18.0.2"}


@pytest.mark.parametrize("argv, message", [
    (["-p", "frame_sizes=[64,9]"], f"perfkit: error: campaign.frame_sizes[1]: 9 is not allowed; allowed: 64 .. "
                                   f"{FRAME_MAX}"),
    (["-p", "frame_sizes"], "perfkit: error: -p: 'frame_sizes' is not allowed; allowed: KEY=VALUE"),
    (["-p", "frame_sizes=[64"], "perfkit: error: -p frame_sizes: '[64' is not allowed; allowed: a YAML value"),
    (["-p", "colour=red"], "perfkit: error: campaign.colour: 'red' is not allowed; allowed: no such key; keys of "
                           "campaign: name, description"),
    (["-p", "generator.backend.name=sim"], "perfkit: error: campaign.generator.backend.name: 'sim' is not allowed; "
                                           "allowed: a key of a mapping"),
    (["-p", "methods[3].params.duration=1"], "perfkit: error: campaign.methods[3].params.duration: 1 is not allowed; "
                                             "allowed: an item of campaign.methods: 0 .. 0 (or 1: a new one)"),
    (["-p", "params.colour=1"], "perfkit: error: campaign.params.colour: 1 is not allowed; allowed: no such key"),
    (["--resume", "nope"], "perfkit: error: --resume: 'nope' is not allowed; allowed: the id of a run under"),
    (["missing.yaml"], "perfkit: error: CAMPAIGN: 'missing.yaml' is not allowed; allowed: a campaign file"),
    (["--baseline", "auto"], "perfkit: error: --baseline: 'auto' is not allowed; allowed: only with --report"),
])
def test_bad_input_exits_2_in_one_line_before_any_kernel(tmp_path, capsys, argv, message):
    code = main(["experiment", *argv, "--root", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not (tmp_path / "reports").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("edit", ["colour=red", "generator.options.colour=1", "methods[0].params.duration=-1"])
def test_the_cli_and_the_python_entry_point_say_the_same(tmp_path, capsys, edit):
    argv = ["--root", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports")]
    assert main(["experiment", "campaigns/smoke.yaml", "-p", edit, *argv]) == 2
    with pytest.raises(ConfigError) as err:
        ex.run_notebook("campaigns/smoke.yaml", edits=parse_edits([edit]), root=tmp_path / "runs",
                        reports=tmp_path / "reports")
    assert capsys.readouterr().err == f"perfkit: error: {err.value}\n"
    assert not (tmp_path / "reports").exists()


# -- running ----------------------------------------------------------------------------------------
SIM = {"name": "exp-sim", "dataplane": "pgwu", "params": {"direction": ["ul", "dl"]}, "frame_sizes": [64, 512, 1518],
       "flows": [1], "dut_cores": [1], "generator": {"backend": "sim", "options": {"model": "smooth",
                                                                                 "threshold": "1.5Mpps"}},
       "methods": [{"method": "maxrate", "params": {"duration": 1}},
                   {"method": "ndrpdr", "params": {"goals": [0.0], "initial_duration": 0.5, "final_duration": 1}}],
       "metrics": False}


def test_run_resumes_only_with_the_same_campaign(tmp_path):
    first = ex.run(SIM, run_id="r", root=tmp_path, progress=False, say=lambda m: None)
    assert first.outcome.status == "complete" and first.outcome.trials_written > 12
    assert ex.stored_campaign("r", tmp_path) == SIM         # what --resume runs the notebook with
    with pytest.raises(StoreError, match="run r was started with another campaign"):
        ex.run({**SIM, "frame_sizes": [64]}, resume="r", root=tmp_path, progress=False, say=lambda m: None)
    with pytest.raises(ConfigError, match="run_id: 'r' is not allowed; allowed: None with resume"):
        ex.run(SIM, run_id="r", resume="r", root=tmp_path, progress=False, say=lambda m: None)
    again = ex.run(SIM, resume="r", root=tmp_path, progress=False, say=lambda m: None)
    assert again.outcome.units_done_before == again.outcome.units_total and again.outcome.trials_written == 0


# -- papermill, end to end ----------------------------------------------------------------------------
def _images(html: str) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(m))) for m in IMG_RE.findall(html)]


@pytest.fixture(scope="module")
def executed(tmp_path_factory, metrics_stack):  # noqa: F811 - the fixture
    """``perfkit experiment CAMPAIGN`` on a simulated DUT, pushing to a real stack."""
    tmp = tmp_path_factory.mktemp("experiment")
    ep = metrics_stack.endpoints()
    campaign = {"name": "exp-e2e", "dataplane": "pgwu", "params": {"direction": ["ul", "dl"]},
                "frame_sizes": [64, 512, 1518], "flows": [1], "dut_cores": [1],
                "generator": {"backend": "sim", "options": {"model": "smooth", "threshold": "2Mpps"}},
                "methods": [{"method": "maxrate", "params": {"duration": 3}},
                            {"method": "ndrpdr", "params": {"goals": [0.0], "initial_duration": 0.5,
                                                            "final_duration": 1}}],
                "metrics": {"enabled": True, "pushgateway_url": ep.pushgateway_url,
                            "prometheus_url": ep.prometheus_url}}
    path = tmp / "e2e.yaml"
    path.write_text(yaml.safe_dump(campaign))
    root, reports = tmp / "runs", tmp / "reports"
    buf = io.StringIO()
    # edits of a top-level key, a nested one and one in a list item; 3.5 s max-rate trials: long
    # enough for Prometheus' 1 s scrapes (3 intervals)
    edits = ["-p", "description=papermill end to end", "-p", "generator.options.threshold=1.5Mpps",
             "-p", "methods[0].params.duration=3.5"]
    with contextlib.redirect_stdout(buf):
        code = main(["experiment", str(path), *edits, "--run", "e2e",
                     "--root", str(root), "--reports", str(reports), "--json", "--no-progress"])
    return {**json.loads(buf.getvalue()), "exit": code, "root": root, "reports": reports, "endpoints": ep}


def test_papermill_runs_the_experiment_and_the_store_holds_its_trials(executed):
    assert executed["exit"] == 0, executed.get("notebook_error")
    assert executed["status"] == "complete" and executed["notebook_ok"]
    store = RunStore.open("e2e", executed["root"])
    trials = store.trials()
    assert len(trials) == executed["trials_written"] > 12
    assert set(trials["unit"].str.split("__").str[1]) == {"maxrate", "ndrpdr"}
    meta = store.metadata()
    assert meta["status"] == "complete" and meta["campaign"]["name"] == "exp-e2e"
    assert meta["campaign"]["source"] == ex.SOURCE
    stored = load_mapping(meta["campaign"]["text"])             # the file with the edits made
    assert stored["description"] == "papermill end to end" and stored["generator"]["options"]["threshold"] == "1.5Mpps"
    assert stored["methods"][0]["params"]["duration"] == 3.5


def test_every_trial_is_pushed_and_cpu_pulled_back_from_prometheus(executed):
    store = RunStore.open("e2e", executed["root"])
    ids = set(store.trials()["trial_id"])
    assert store.pushed_trial_ids() == ids and executed["metrics"]["pushed"] == len(ids)
    # the run retired its own trials from the Pushgateway as Prometheus got them (RETIRE_EVERY):
    # a few are left there, and Prometheus has every one at its push time
    groups = requests.get(executed["endpoints"].pushgateway_url + "/api/v1/metrics", timeout=10).json()["data"]
    on_gateway = {g["labels"].get("trial_id") for g in groups if g["labels"].get("run_id") == "e2e"}
    assert on_gateway < ids and executed["metrics"]["retired_own"] == len(ids - on_gateway) > 0
    scraped = pushed_trials_frame("e2e", executed["endpoints"], store.push_times())
    assert set(scraped["trial_id"]) == ids
    cpu = store.prometheus_cpu()
    trials = store.trials()
    maxrate = set(trials[trials["method"].str.startswith("maxrate")]["trial_id"])
    assert cpu is not None and set(cpu["trial_id"]) == maxrate         # node-exporter samples of each 3.5 s trial
    models = json.loads((executed["root"] / "e2e" / ex.OUTPUTS_DIR / "models.json").read_text())
    assert models["cpu_source"].startswith("CPU source: Prometheus node-exporter")


def test_the_notebook_saves_models_and_figures(executed):
    out = executed["root"] / "e2e" / ex.OUTPUTS_DIR
    assert Path(executed["outputs"]) == out
    models = json.loads((out / "models.json").read_text())
    assert executed["models"] == models                                # --json prints them too
    assert all(set(f) >= {"r2", "cv_r2", "weak"} for m in models["cpu_models"] for f in m["fits"])
    variants = {m["variant"] for m in models["cpu_models"]}
    assert variants == {"ul", "dl"}
    for m in models["cpu_models"]:
        fit = next(f for f in m["fits"] if f["name"] == "1 core")
        assert fit["features"] == ["frame_size"] and fit["n_samples"] == 3 and "frame_size" in fit["equation"]
    saved = json.loads((out / "outcome.json").read_text())
    assert saved["run_id"] == "e2e" and saved["status"] == "complete"
    table = (out / "throughput.csv").read_text().splitlines()
    assert table[0].startswith("scenario_key") or "scenario_key" in table[0]
    assert len(table) - 1 == 2 * 3 * 2                                # variants x frame sizes x methods
    for name in ("throughput_mpps", "rx_gbps_max", "cpu_vs_frame_size", "cost_fit"):
        im = Image.open(out / "figures" / f"{name}.png")
        assert im.width > 200 and im.height > 100 and np.asarray(im.convert("L"), dtype=float).std() > 5


def test_the_executed_notebook_is_kept_and_rendered(executed):
    kept = executed["root"] / "e2e" / ex.KEPT_NOTEBOOK
    assert Path(executed["notebook"]) == kept
    nb = nbformat.read(kept, as_version=4)
    injected = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    values: dict = {}
    exec(injected.source, values)  # noqa: S102 - papermill's injected cell
    assert set(values) - {"__builtins__"} == {"campaign", *ex.RUN_PARAMETERS}
    assert values["campaign"]["generator"]["backend"] == "sim" and values["run_id"] == "e2e" and values["resume"] is None
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    rdir = executed["reports"] / "e2e"
    assert Path(executed["notebook_html"]) == rdir / "experiment.html"
    html = (rdir / "experiment.html").read_text()
    assert "Traceback" not in html and "e2e</code>: complete" in html and len(_images(html)) >= 4
    assert "report" not in executed                                   # only with --report


def test_the_report_index_lists_the_experiment_first(executed, tmp_path):
    """What --report adds (the pages themselves are tested in test_report.py): the index links the
    experiment's page before the report's pages."""
    rdir = tmp_path / "e2e"
    rdir.mkdir()
    page = ex.render_page(executed["reports"] / "e2e" / "notebooks" / "experiment.ipynb", rdir)
    rep = build_report("e2e", data_root=executed["root"], reports_root=tmp_path, progress=False,
                       pages=(), extra_pages=[page])
    assert rep.ok and [p.name for p in rep.pages] == ["experiment", "index"]
    index = (rdir / "index.html").read_text()
    assert 'href="experiment.html"' in index and "the notebook that drove this run" in index


# -- Ctrl-C -----------------------------------------------------------------------------------------
class _SlowGateway(BaseHTTPRequestHandler):
    """A Pushgateway that takes its time: the run is still measuring when the test interrupts it."""

    first_push: threading.Event
    delay = 0.5

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(503 if self.path.startswith("/prom") else 200)
        self.end_headers()

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).first_push.set()
        time.sleep(type(self).delay)
        self.send_response(200)
        self.end_headers()


@pytest.mark.slow   # make test keeps a run stopped by SIGINT and resumed (test_reliability)
def test_ctrl_c_interrupts_the_kernel_and_the_run_resumes(tmp_path, capsys):
    handler = type("Gateway", (_SlowGateway,), {"first_push": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        path = tmp_path / "slow.yaml"
        path.write_text(yaml.safe_dump({**SIM, "metrics": {"pushgateway_url": url, "prometheus_url": url + "/prom"}}))
        argv = ["--root", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports"), "--no-progress"]
        proc = subprocess.Popen([sys.executable, "-m", "perfkit", "experiment", str(path), "--run", "i", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert handler.first_push.wait(120), "the run never pushed a trial"
            proc.send_signal(signal.SIGINT)                  # what a terminal's Ctrl-C sends perfkit
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, err
        assert err.rstrip().splitlines()[-1] == "perfkit: interrupted; resume with: perfkit experiment --resume i"
        store = RunStore.open("i", tmp_path / "runs")
        assert store.metadata()["status"] == "interrupted"
        before = set(store.trials()["trial_id"])
        assert before
        handler.delay = 0.0
        assert main(["experiment", "--resume", "i", *argv, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["status"] == "complete" and out["units_done_before"] < out["units_total"]
        trials = RunStore.open("i", tmp_path / "runs").trials()
        assert before <= set(trials["trial_id"]) and trials["trial_id"].is_unique
    finally:
        server.shutdown()
        server.server_close()
