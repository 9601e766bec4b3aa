"""The experiment notebook (notebooks/experiment.ipynb) and its module (perfkit/experiment.py).

- its parameters are a campaign's keys: every shipped campaign, as parameters, is the same campaign
  (``make run`` runs campaigns/default.yaml through the notebook);
- bad parameters are refused before any kernel starts, in one line naming the parameter;
- the runner resumes an experiment only with the parameters it started with;
- papermill executes the notebook end to end on a simulated DUT with a real Prometheus, Pushgateway
  and node-exporter: trials in the store and pushed, CPU pulled back, models and figures saved, the
  executed notebook kept with the run, and the report set written with the experiment's page.
"""
from __future__ import annotations

import base64
import contextlib
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
from PIL import Image

from perfkit import experiment as ex
from perfkit.campaign import load_campaign
from perfkit.cli import main
from perfkit.errors import ConfigError, StoreError
from perfkit.metrics.query import pushed_trials_frame
from perfkit.report import build_report
from perfkit.store import RunStore
from tests.conftest import ROOT
from tests.metrics_fixtures import metrics_stack  # noqa: F401 - a fixture

CAMPAIGNS = sorted((ROOT / "campaigns").glob("*.yaml"))
IMG_RE = re.compile(r'<img[^>]+src="data:image/png;base64,([A-Za-z0-9+/=\s]+)"')


def _comparable(campaign) -> dict:
    d = campaign.to_dict()
    d.pop("source")
    return d


# -- parameters <-> campaigns ------------------------------------------------------------------------
@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.name)
def test_every_shipped_campaign_is_expressed_by_the_notebooks_parameters(path):
    exp = ex.Experiment.from_campaign(path)
    assert _comparable(exp.campaign()) == _comparable(load_campaign(path))
    # the parameters papermill injects give the same experiment again
    again = ex.Experiment.from_parameters(exp.parameters())
    assert again == exp and _comparable(again.campaign()) == _comparable(load_campaign(path))


def test_default_campaign_as_parameters():
    p = ex.Experiment.from_campaign(ROOT / "campaigns" / "default.yaml").parameters()
    assert p["generator"] == "xdp" and p["generator_options"] == {"flow_op": "random"}
    assert p["frame_sizes"] == [64, 256, 512, 1024, 1424] and p["flows"] == {"single": 1, "multi": 1001000}
    assert [m.get("label", m["method"]) for m in p["methods"]] == ["maxrate", "ndr"]
    assert p["perf"] == ["maxrate"] and p["trex_profile"] is None


def test_the_notebook_has_a_parameter_for_every_field_and_no_outputs():
    nb = nbformat.read(ex.NOTEBOOK, as_version=4)
    assert set(papermill.inspect_notebook(str(ex.NOTEBOOK))) == set(ex.parameter_names()) | set(ex.RUN_PARAMETERS)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "notebook outputs are never committed"
    # its defaults are a valid experiment on the local testbed
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    namespace: dict = {}
    exec(cell.source, namespace)  # noqa: S102 - the notebook's own parameters cell
    exp = ex.from_namespace(namespace)
    assert exp.generator == "xdp" and exp.campaign(cpus=2).dut_cores == (1,)


def test_trex_profile_and_server_go_into_the_campaign():
    # a TRex STL profile on the local testbed: the generator options perfkit trial --trex-profile uses
    exp = ex.Experiment.from_parameters({"trex_profile": "trex_profiles/pgwu.py", "trex_tunables": {"flows": 1000}})
    campaign = exp.campaign(cpus=2)
    assert campaign.generator.options == {"trex_profile": "trex_profiles/pgwu.py", "trex_tunables": ["flows=1000"]}
    back = ex.Experiment.from_campaign_text(exp.campaign_text())
    assert back.trex_profile == "trex_profiles/pgwu.py" and back.trex_tunables == ["flows=1000"]
    assert back.generator_options == {} and _comparable(back.campaign(cpus=2)) == _comparable(campaign)
    # a lab's TRex server
    lab = ex.Experiment.from_parameters({"generator": "trex", "trex_server": "10.0.0.2", "dut_cores": [4]})
    assert lab.campaign(cpus=2).generator.options == {"server": "10.0.0.2"}
    trex = {**yaml.safe_load((ROOT / "campaigns" / "smoke.yaml").read_text()), "dut_cores": [2],
            "generator": {"backend": "trex", "options": {"server": "trex-lab"}}}
    assert ex.Experiment.from_campaign_text(yaml.safe_dump(trex)).trex_server == "trex-lab"


@pytest.mark.parametrize("values, message", [
    ({"frame_sizes": [64, 9]}, "frame_sizes[1]: 9 is not allowed; allowed: 64 .."),
    ({"frame_sizes": 64}, "frame_sizes: 64 is not allowed; allowed: a list of frame sizes [bytes]"),
    ({"generator": "nope"}, "generator: 'nope' is not allowed; allowed: xdp, trex, sim"),
    ({"generator_options": {"colour": 1}}, "generator_options.colour: 1 is not allowed; allowed: options of the xdp"),
    ({"params": {"colour": 1}}, "params.colour: 1 is not allowed; allowed: no such key; keys of params:"),
    ({"methods": [{"method": "maxrate", "params": {"duration": -1}}]},
     "methods[0].params.duration: -1 is not allowed; allowed: a positive number [s]"),
    ({"repeats": True}, "repeats: True is not allowed; allowed: an integer >= 1"),
    ({"colour": 1}, "colour: 1 is not allowed; allowed: a parameter of experiment.ipynb: name, description"),
    ({"trex_server": "10.0.0.2"}, "trex_server: '10.0.0.2' is not allowed; allowed: None with generator 'xdp'"),
    ({"trex_tunables": {"a": 1}}, "trex_tunables: {'a': 1} is not allowed; allowed: nothing unless trex_profile"),
    ({"trex_profile": "missing.py"}, "trex_profile: 'missing.py' is not allowed; allowed: the path of an existing TRex"),
    ({"trex_profile": "trex_profiles/pgwu.py", "trex_tunables": ["--flows"]},
     "trex_tunables: '--flows' is not allowed; allowed: KEY=VALUE"),
    ({"generator_options": {"trex_profile": "x.py"}}, "generator_options.trex_profile: 'x.py' is not allowed; allowed: "
                                                      "nothing here: the parameter trex_profile gives it"),
    ({"generator": "trex", "trex_server": "x"}, "dut_cores: 'auto' is not allowed; allowed: a list of core counts"),
    ({"metrics": {"prometheus": "x"}}, "metrics.prometheus: 'x' is not allowed; allowed: no such key"),
])
def test_bad_parameters_name_the_parameter(values, message):
    with pytest.raises(ConfigError) as err:
        ex.Experiment.from_parameters(values).check(cpus=2)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("argv, message", [
    (["-p", "frame_sizes=[64,9]"], "perfkit: error: frame_sizes[1]: 9 is not allowed; allowed: 64 .."),
    (["-p", "frame_sizes"], "perfkit: error: -p: 'frame_sizes' is not allowed; allowed: NAME=VALUE"),
    (["-p", "colour=red"], "perfkit: error: colour: 'red' is not allowed; allowed: a parameter of experiment.ipynb"),
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


# -- running ----------------------------------------------------------------------------------------
SIM = {"name": "exp-sim", "dataplane": "pgwu", "params": {"direction": ["ul", "dl"]}, "frame_sizes": [64, 512, 1518],
       "flows": [1], "dut_cores": [1], "generator": "sim",
       "generator_options": {"model": "smooth", "threshold": "1.5Mpps"},
       "methods": [{"method": "maxrate", "params": {"duration": 1}},
                   {"method": "ndrpdr", "params": {"goals": [0.0], "initial_duration": 0.5, "final_duration": 1}}],
       "metrics": False}


def test_run_resumes_only_with_the_same_parameters(tmp_path):
    exp = ex.Experiment.from_parameters(SIM)
    first = ex.run(exp, run_id="r", data_root=tmp_path, progress=False, say=lambda m: None)
    assert first.outcome.status == "complete" and first.outcome.trials_written > 12
    assert ex.stored_experiment("r", tmp_path) == exp        # what --resume re-runs the notebook with
    other = ex.Experiment.from_parameters({**SIM, "frame_sizes": [64]})
    with pytest.raises(StoreError, match="run r was started with other parameters"):
        ex.run(other, run_id="r", resume=True, data_root=tmp_path, progress=False, say=lambda m: None)
    again = ex.run(exp, run_id="r", resume=True, data_root=tmp_path, progress=False, say=lambda m: None)
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
                "generator": {"backend": "sim", "options": {"model": "smooth", "threshold": "1.5Mpps"}},
                # 3.5 s max-rate trials: long enough for Prometheus' 1 s scrapes (3 intervals)
                "methods": [{"method": "maxrate", "params": {"duration": 3.5}},
                            {"method": "ndrpdr", "params": {"goals": [0.0], "initial_duration": 0.5,
                                                            "final_duration": 1}}],
                "metrics": {"enabled": True, "pushgateway_url": ep.pushgateway_url,
                            "prometheus_url": ep.prometheus_url}}
    path = tmp / "e2e.yaml"
    path.write_text(yaml.safe_dump(campaign))
    root, reports = tmp / "runs", tmp / "reports"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["experiment", str(path), "-p", "description=papermill end to end", "--run", "e2e",
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
    assert meta["campaign"]["source"] == ex.SOURCE and "papermill end to end" in meta["campaign"]["text"]


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
    assert "generator = \"sim\"" in injected.source and "run_id = \"e2e\"" in injected.source
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


def test_ctrl_c_interrupts_the_kernel_and_the_run_resumes(tmp_path, capsys):
    handler = type("Gateway", (_SlowGateway,), {"first_push": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        path = tmp_path / "slow.yaml"
        path.write_text(yaml.safe_dump({**{k: v for k, v in SIM.items() if not k.startswith("generator")},
                                        "generator": {"backend": "sim", "options": SIM["generator_options"]},
                                        "metrics": {"pushgateway_url": url, "prometheus_url": url + "/prom"}}))
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
