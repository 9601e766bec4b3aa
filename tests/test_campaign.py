"""Campaign files, their expansion, runs into the store, pushing, and resume after an interruption."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from perfkit.campaign import estimate, expand, from_mapping, load_campaign, parse_campaign, resume_campaign, run_campaign
from perfkit.campaign.journal import Journal
from perfkit.campaign.backend import LazyGenerator, generator_options
from perfkit.campaign.edit import apply_edits, parse_edits
from perfkit.campaign.replay import ReplayMeasurer
from perfkit.campaign.schema import DEFAULTS, GENERATOR_DEFAULTS, METRICS_DEFAULTS, REQUIRED, load_mapping
from perfkit.cli import main
from perfkit.errors import ConfigError, PerfkitError, StoreError
from perfkit.generators.sim import SimGenerator
from perfkit.store import RunStore
from perfkit.search import METHODS
from perfkit.scenario import Scenario
from tests.campaign_fixtures import ROOT, produce_run, session_runs

CAMPAIGNS = ROOT / "campaigns"
#: A small deterministic campaign (sharp/smooth sim: the same rates every time) for resume tests.
TINY = """
name: tiny
params: {direction: [ul, dl]}
frame_sizes: [64, 1024]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: smooth, threshold: 1.2Mpps}
methods:
  - method: maxrate
    params: {duration: 1}
  - method: ndrpdr
    params: {goals: [0.0, 0.005], initial_duration: 0.5, final_duration: 1}
metrics: false
"""


def tiny(tmp_path: Path, **changes: object) -> Path:
    raw = yaml.safe_load(TINY)
    raw.update(changes)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# -- the shipped campaigns ----------------------------------------------------------------------
def test_default_campaign_is_the_seed_grid_and_fits_the_budget():
    text = (CAMPAIGNS / "default.yaml").read_text()
    c = parse_campaign(text, "default.yaml", cpus=2)
    assert c.dataplane == "pgwu" and dict(c.params)["direction"] == ("ul", "dl")
    assert dict(c.params)["vlan"] == (True,) and dict(c.params)["sessions"] == (0,)  # as many sessions as flows
    assert c.frame_sizes == (64, 256, 512)  # line rates above what the DUT forwards
    assert c.flows == (1, 1_001_000)  # a one-session reference and seed 001's table
    table = next(s for s in c.scenarios() if s.flows > 1).traffic()
    assert (table.plan.count, table.plan.tenant_count, table.plan.full) == (1_001_000, 1000, True)
    assert c.generator.options == {"flow_op": "random", "disturbed_retries": 1}  # flows walk the table at random
    assert c.dut_cores == (1,) and c.shared_cores == ()
    assert [m.name for m in c.methods] == ["maxrate", "ndrpdr"]
    # NDR and PDR 0.5 %, as CSIT reports them, with an exceed ratio for a host that stalls
    goals = METHODS["ndrpdr"][0](dict(c.methods[1].params)).search_goals()
    assert [(g.loss_ratio, g.exceed_ratio) for g in goals] == [(0.0, 0.5), (0.005, 0.5)]
    assert c.generator.backend == "xdp"
    units = expand(c)
    assert len(units) == 2 * 3 * 2 * 1 * 2
    est = estimate(c)
    assert est.total_seconds <= 11 * 60, est.describe()   # 15 min for make run, minus set-up and report
    assert not [s.frame_size for s in c.scenarios() if c.needs_jumbo(s)]
    # every core count a bigger machine allows
    assert parse_campaign(text, cpus=8).dut_cores == (1, 2, 3, 4, 5, 6, 7)


@pytest.mark.parametrize("name", ["default", "smoke", "sim"])
def test_shipped_campaigns_validate(name):
    c = load_campaign(CAMPAIGNS / f"{name}.yaml")
    ids = [u.id for u in expand(c)]
    assert len(ids) == len(set(ids))


# -- validation ----------------------------------------------------------------------------------
def _mutate(**changes: object) -> str:
    raw = yaml.safe_load((CAMPAIGNS / "default.yaml").read_text())
    for key, value in changes.items():
        target = raw
        parts = key.split("__")
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if value is _DELETE:
            del target[parts[-1]]
        else:
            target[parts[-1]] = value
    return yaml.safe_dump(raw)


_DELETE = object()


@pytest.mark.parametrize("changes, message", [
    ({"frame_sizes": [64, 128, 63]}, "campaign.frame_sizes[2]: 63 is not allowed; allowed: 64 .. 9018"),
    ({"frame_sizes": [64, 64]}, "campaign.frame_sizes[1]: 64 is not allowed; allowed: each value once"),
    ({"frame_sizes": "64"}, "campaign.frame_sizes: '64' is not allowed; allowed: a non-empty list"),
    ({"params": {"direction": ["ul", "up"]}}, "campaign.params.direction[1]: 'up' is not allowed; allowed: ul, dl"),
    ({"params": {"protocol": "tcp"}}, "campaign.params.protocol: 'tcp' is not allowed; allowed: no such key; keys of "
     "campaign.params: direction, sessions, udp_csum, vlan"),
    ({"params": {"sessions": 200000}}, "campaign.sessions: 200000 is not allowed; allowed: at most 130560 untagged"),
    ({"dataplane": "bng"}, "campaign.dataplane: 'bng' is not allowed; allowed: "),
    ({"directions": ["ul"]}, "campaign.directions: ['ul'] is not allowed; allowed: no such key; keys of campaign:"),
    ({"frame_size": [64]}, "campaign.frame_size: [64] is not allowed; allowed: no such key; keys of campaign:"),
    ({"flows": {"single": 1, "multi": 1}}, "campaign.flows.multi: 1 is not allowed; allowed: an integer, 2 .."),
    ({"flows": [1, 0]}, "campaign.flows[1]: 0 is not allowed"),
    ({"dut_cores": [1, 5]}, "campaign.dut_cores[1]: 5 is not allowed; allowed: 1 .. 2 (this machine has 2 CPUs)"),
    ({"dut_cores": "all"}, "campaign.dut_cores: 'all' is not allowed; allowed: auto, auto+shared or a list"),
    ({"repeats": 0}, "campaign.repeats: 0 is not allowed; allowed: an integer, 1 .. 100"),
    ({"params": {"udp_csum": "maybe"}}, "campaign.params.udp_csum: 'maybe' is not allowed; allowed: on or off"),
    ({"line_rate": "12GbE"}, "campaign.line_rate: '12GbE' is not allowed; allowed: 1GbE, 10GbE"),
    ({"generator__backend": "dpdk"}, "campaign.generator.backend: 'dpdk' is not allowed; allowed: xdp, trex, sim"),
    ({"generator__options": {"mtu": 9000}}, "campaign.generator.options.mtu: 9000 is not allowed"),
    ({"generator__jumbo_mtu": 1400}, "campaign.generator.jumbo_mtu: 1400 is not allowed; allowed: an integer, 1501"),
    ({"generator__host_check_seconds": 0}, "campaign.generator.host_check_seconds: 0 is not allowed; allowed: a "
                                           "number of seconds, 0 < x <= 600"),
    ({"methods__0__method": "fastest"}, "campaign.methods[0].method: 'fastest' is not allowed; allowed: maxrate"),
    ({"methods__1__params__relative_width": 2}, "campaign.methods[1].params.relative_width: 2 is not allowed; "
                                                "allowed: 0 < x < 1"),
    ({"methods__1__params__final_duration": 0.1}, "campaign.methods[1].params.initial_duration: 0.5 is not allowed"),
    ({"methods__1__params__speed": 3}, "campaign.methods[1].params.speed: 3 is not allowed; allowed: a parameter of "
                                       "NdrPdr"),
    ({"methods__0__params__max_rate": "fast"}, "campaign.methods[0].params.max_rate: 'fast' is not allowed"),
    ({"perf": ["max"]}, "campaign.perf: ['max'] is not allowed; allowed: true, false or a list of method labels: "
                        "maxrate, ndr"),
    ({"generator__backend": "sim", "perf": True}, "campaign.perf: True is not allowed; allowed: false: perf records"),
    ({"methods__1__label": "maxrate"}, "campaign.methods[1].label: 'maxrate' is not allowed; allowed: a label no "
                                       "other method has"),
    ({"methods": []}, "campaign.methods: [] is not allowed; allowed: a non-empty list"),
    ({"metrics__enabled": "yes"}, "campaign.metrics.enabled: 'yes' is not allowed; allowed: true or false"),
    ({"metrics__prometheus": "x"}, "campaign.metrics.prometheus: 'x' is not allowed; allowed: no such key"),
])
def test_validation_errors_name_field_value_and_allowed(changes, message):
    with pytest.raises(ConfigError) as err:
        parse_campaign(_mutate(**changes), cpus=2)
    assert message in str(err.value)


def test_validation_of_the_file_itself(tmp_path):
    with pytest.raises(ConfigError, match=r"campaign: '.*missing.yaml' is not allowed; allowed: a readable YAML"):
        load_campaign(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="allowed: valid YAML"):
        parse_campaign("frame_sizes: [64\n")
    with pytest.raises(ConfigError, match="campaign: 'list' is not allowed; allowed: a mapping"):
        parse_campaign("- 64\n")
    with pytest.raises(ConfigError, match=r"campaign.frame_sizes: None is not allowed"):
        parse_campaign(_mutate(frame_sizes=_DELETE))


# -- a campaign as a mapping; edits (perfkit experiment -p KEY=VALUE) ----------------------------------
@pytest.mark.parametrize("path", sorted(CAMPAIGNS.glob("*.yaml")), ids=lambda p: p.name)
def test_a_campaign_files_mapping_is_the_same_campaign(path):
    text = path.read_text()
    assert from_mapping(load_mapping(text, str(path)), text=text, source=str(path), cpus=2) == \
        parse_campaign(text, str(path), cpus=2)


def test_a_key_left_out_takes_the_schemas_default():
    """The schema says once what a missing key means: a campaign with only the required keys is the
    campaign with every default written out."""
    least = {"frame_sizes": [64], "methods": ["maxrate"]}
    assert set(least) == set(REQUIRED)
    written = {**least, **DEFAULTS, "generator": dict(GENERATOR_DEFAULTS), "metrics": dict(METRICS_DEFAULTS)}
    short, full = (from_mapping(m, cpus=2).to_dict() for m in (least, written))
    assert short == full and full["generator"]["setup_seconds"] == 5.0      # the xdp backend's estimate
    for key in REQUIRED:
        with pytest.raises(ConfigError, match=f"campaign.{key}: None is not allowed"):
            from_mapping({k: v for k, v in least.items() if k != key}, cpus=2)


def test_edits_set_nested_keys_list_items_and_yaml_values():
    base = load_mapping((CAMPAIGNS / "smoke.yaml").read_text(), "smoke.yaml")
    edits = parse_edits(["generator.options.threshold=2Mpps", "methods[1].params.goals=[0.0]",
                         "methods.0.params.duration=2", "metrics.start_local=false", "flows=[1, 1024]",
                         "params.direction=[dl]", "methods[2]=latency", "description="])
    assert edits["flows"] == [1, 1024] and edits["methods[1].params.goals"] == [0.0] and edits["description"] is None
    edited = apply_edits(base, {**edits, "description": "edited"})
    assert edited["generator"] == {"backend": "sim", "options": {"model": "smooth", "threshold": "2Mpps"}}
    assert edited["methods"][0]["params"] == {"duration": 2} and edited["methods"][1]["params"]["goals"] == [0.0]
    assert edited["methods"][2] == "latency" and edited["metrics"] == {"enabled": False, "start_local": False}
    assert base["generator"]["options"]["threshold"] == "1.5Mpps"              # the original is left as it was
    campaign = from_mapping(edited, cpus=2)
    assert [m.label for m in campaign.methods] == ["maxrate", "ndrpdr", "latency"] and campaign.flows == (1, 1024)
    assert dict(campaign.params)["direction"] == ("dl",) and campaign.description == "edited"
    # a short form is made long on the way; a missing mapping is made
    assert apply_edits({"generator": "sim"}, {"generator.options.model": "sharp"})["generator"] == \
        {"backend": "sim", "options": {"model": "sharp"}}
    assert apply_edits({}, {"metrics.enabled": False}) == {"metrics": {"enabled": False}}


@pytest.mark.parametrize("edits, message", [
    ({"colour": "red"}, "campaign.colour: 'red' is not allowed; allowed: no such key; keys of campaign: name, "),
    ({"generator.colour": 1}, "campaign.generator.colour: 1 is not allowed; allowed: no such key; keys of "
                              "campaign.generator: backend, options"),
    ({"methods[0].speed": 3}, "campaign.methods[0].speed: 3 is not allowed; allowed: no such key; keys of "
                              "campaign.methods[0]: method, label, params"),
    ({"methods[5].label": "x"}, "campaign.methods[5].label: 'x' is not allowed; allowed: an item of campaign.methods: "
                                "0 .. 1 (or 2: a new one)"),
    ({"name.first": "x"}, "campaign.name.first: 'x' is not allowed; allowed: a key of a mapping; campaign.name holds a "
                           "value, not keys (set it whole: -p name=VALUE)"),
    ({"frame_sizes.big": 1}, "campaign.frame_sizes.big: 1 is not allowed; allowed: an index of campaign.frame_sizes"),
])
def test_an_edit_of_a_key_the_schema_does_not_have_is_refused(edits, message):
    base = load_mapping((CAMPAIGNS / "smoke.yaml").read_text(), "smoke.yaml")
    with pytest.raises(ConfigError) as err:
        apply_edits(base, edits)
    assert str(err.value).startswith(message), str(err.value)


def test_auto_dut_cores_per_machine_and_backend():
    text = _mutate()
    assert parse_campaign(text, cpus=1).dut_cores == (1,)
    assert parse_campaign(text, cpus=1).shared_cores == (1,)          # xdp: DUT and generator share the CPU
    assert parse_campaign(text, cpus=4).dut_cores == (1, 2, 3)
    shared = parse_campaign(_mutate(dut_cores="auto+shared"), cpus=4)
    assert shared.dut_cores == (1, 2, 3, 4) and shared.shared_cores == (4,)
    flagged = [u.shared_cores for u in expand(shared) if u.scenario.dut_cores == 4]
    assert len(flagged) == 2 * 3 * 2 * 2 and all(flagged)
    with pytest.raises(ConfigError, match="campaign.dut_cores: 'auto' is not allowed; allowed: a list of core "
                                          "counts for the trex generator"):
        parse_campaign(_mutate(generator__backend="trex", perf=False), cpus=4)
    assert parse_campaign(_mutate(generator__backend="trex", perf=False, dut_cores=[8, 16]), cpus=2).dut_cores == (8, 16)


def test_expansion_order_ids_and_repeats():
    c = parse_campaign(_mutate(repeats=2, frame_sizes=[64, 3024], flows=[1]), cpus=2)
    units = expand(c)
    assert [u.id for u in units[:4]] == ["pgwu-ul-64B-1flow-1core-vlan__maxrate__r1",
                                         "pgwu-ul-64B-1flow-1core-vlan__ndrpdr__r1",
                                         "pgwu-ul-64B-1flow-1core-vlan__maxrate__r2",
                                         "pgwu-ul-64B-1flow-1core-vlan__ndrpdr__r2"]
    # one scenario's units are consecutive: one generator per scenario
    seen, last = [], None
    for u in units:
        if u.scenario != last:
            assert u.scenario not in seen
            seen.append(u.scenario)
            last = u.scenario
    assert len(seen) == 4


def test_rates_in_params_resolve_per_frame_size():
    c = parse_campaign(_mutate(methods=[{"method": "maxrate", "params": {"max_rate": "50%", "duration": 1}}],
                               frame_sizes=[64, 1024]), cpus=2)
    small, big = (u.method.resolved_params(u.scenario)["max_rate"] for u in expand(c)
                  if u.scenario.frame_size in (64, 1024) and u.scenario.params["direction"] == "dl" and u.scenario.flows == 1)
    assert small == pytest.approx(5e9 / ((64 + 4 + 20) * 8))  # DL frames carry the tenant's 802.1Q tag
    assert big == pytest.approx(5e9 / ((1024 + 4 + 20) * 8))


def test_jumbo_mtu_goes_to_generators_that_take_it():
    class TakesMtu:
        def __init__(self, scenario, mtu=1500):
            pass

    c = parse_campaign(_mutate(generator__backend="trex", perf=False, generator__jumbo_mtu=9000, generator__options={}, dut_cores=[1],
                               frame_sizes=[1424, 3024]), cpus=2)
    by_size = {s.frame_size: generator_options(c, s, TakesMtu) for s in c.scenarios()}
    assert by_size[3024] == {"mtu": 9000}
    assert by_size[1424] == {}
    auto = parse_campaign(_mutate(dut_cores=[1], frame_sizes=[1424, 3024], generator__options={}),
                          cpus=2)                                           # default: the generator decides
    assert auto.generator.jumbo_mtu is None
    assert all(generator_options(auto, s, TakesMtu) == {} for s in auto.scenarios())
    sim = parse_campaign(_mutate(generator={"backend": "sim"}, perf=False), cpus=2)
    assert "mtu" not in generator_options(sim, sim.scenarios()[-1], SimGenerator)


# -- running ---------------------------------------------------------------------------------------
def test_run_writes_trials_searches_journal_and_metadata():
    runs = session_runs()
    store = RunStore.open(runs.current, runs.root)
    trials = store.trials()
    c = load_campaign(runs.campaign)
    units = expand(c)
    summaries = {s["unit"]: s for s in store.searches()}
    assert set(summaries) == {u.id for u in units}
    assert set(trials["unit"]) == {u.id for u in units}
    assert (trials["attempt"] == 1).all()
    assert trials["trial_id"].is_unique
    in_results = [t for s in summaries.values() for t in s["trial_ids"]]
    assert sorted(in_results) == sorted(trials["trial_id"])
    files = sorted((store.path / "trials").glob("*.parquet"))
    assert len(files) == len(trials)
    meta = store.metadata()
    for key in ("host", "kernel", "cpu_model", "cpus", "perfkit", "bpf_objects", "campaign", "estimate"):
        assert key in meta, key
    assert meta["status"] == "complete" and meta["units_done"] == len(units)
    assert meta["campaign"]["text"] == runs.campaign.read_text()
    assert len(meta["perfkit"]["git_sha"]) >= 7
    assert all(len(h) == 64 for h in meta["bpf_objects"].values())
    # where each dataplane came from: the built-in ones from perfkit's own package
    assert {dp: src["package"] for dp, src in meta["dataplanes"].items()} == \
        {dp: f"perfkit=={meta['perfkit']['version']}" for dp in c.dataplanes}
    st = Journal(store.path).state()
    assert set(st.done) == {u.id for u in units}


def test_unavailable_backend_fails_before_creating_a_run(tmp_path, monkeypatch):
    from perfkit import generators

    monkeypatch.setitem(generators.BACKENDS, "sim", "perfkit.generators.nonexistent:Nope")
    with pytest.raises(ConfigError, match="campaign.generator.backend: 'sim' is not allowed; allowed: an available"):
        produce_run(tiny(tmp_path), tmp_path / "runs", "r1")
    assert not (tmp_path / "runs" / "r1").exists()


class FlakyGenerator(SimGenerator):
    """Fails to set up for 1024-byte DL frames (e.g. a testbed that rejects an MTU)."""

    def __init__(self, scenario, **kw):
        if scenario.frame_size == 1024 and scenario.params["direction"] == "dl":
            raise PerfkitError("testbed: cannot set up this scenario")
        super().__init__(scenario, **kw)


def test_failed_units_are_reported_and_retried_on_resume(tmp_path, monkeypatch):
    from perfkit import generators

    monkeypatch.setitem(generators.BACKENDS, "sim", "tests.test_campaign:FlakyGenerator")
    out = produce_run(tiny(tmp_path), tmp_path / "runs", "r1")
    assert out.status == "incomplete"
    assert sorted(out.units_failed) == ["pgwu-dl-1024B-1flow-1core__maxrate", "pgwu-dl-1024B-1flow-1core__ndrpdr"]
    assert "cannot set up" in next(iter(out.units_failed.values()))
    monkeypatch.setitem(generators.BACKENDS, "sim", "perfkit.generators.sim:SimGenerator")
    again = resume_campaign("r1", root=tmp_path / "runs", metrics=False, progress=False, say=lambda m: None)
    assert again.status == "complete" and again.units_done == 2
    assert RunStore.open("r1", tmp_path / "runs").metadata()["status"] == "complete"


# -- resume ----------------------------------------------------------------------------------------
def _keys(store: RunStore) -> list[tuple[str, float, float]]:
    t = store.trials()
    return list(zip(t["unit"], t["intended_pps"], t["duration"]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> RunStore:
    """The tiny campaign run without interruption (the sim DUT is deterministic: every run of it
    measures the same trials in the same order)."""
    tmp = tmp_path_factory.mktemp("reference")
    produce_run(tiny(tmp), tmp / "runs", "reference")
    return RunStore.open("reference", tmp / "runs")


@pytest.mark.parametrize("stops", [(1,), (4,), (9, 15), (2, 3, 20)])
def test_resume_after_interruptions_neither_repeats_nor_loses_trials(tmp_path, stops, reference):
    campaign = tiny(tmp_path)
    root = tmp_path / "runs"
    count = [0]
    written_before: list[str] = []

    def interrupt(trial):
        count[0] += 1
        written_before.append(trial.trial_id)
        if count[0] in stops:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        produce_run(campaign, root, "r", on_trial=interrupt)
    sessions = 1
    while True:
        try:
            out = resume_campaign("r", root=root, metrics=False, progress=False, on_trial=interrupt,
                                  say=lambda m: None)
            break
        except KeyboardInterrupt:
            sessions += 1
    assert sessions == len(stops)
    assert out.status == "complete"
    store = RunStore.open("r", root)
    trials = store.trials()
    assert trials["trial_id"].is_unique                                  # nothing written twice
    assert len(list((store.path / "trials").glob("*.parquet"))) == len(reference.trials())
    assert set(written_before) == set(trials["trial_id"])                # nothing lost
    assert _keys(store) == _keys(reference)                              # the same trials, in the same order
    in_results = {t for s in store.searches() for t in s["trial_ids"]}
    assert in_results == set(trials["trial_id"])                         # every trial counts in its unit
    resumed = [s for s in store.searches() if s["replayed"]]
    assert resumed, "the interrupted unit replayed its stored trials"
    assert store.metadata()["status"] == "complete" and len(store.metadata()["resumes"]) == len(stops)


def test_resume_through_the_cli(tmp_path, capsys):
    campaign = tiny(tmp_path)
    root = tmp_path / "runs"

    def stop(trial):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        produce_run(campaign, root, "r", on_trial=stop)
    assert main(["run", "--resume", "r", "--root", str(root), "--no-metrics", "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "complete" and out["trials_replayed"] == 1 and out["units_done_before"] == 0
    assert main(["run", "--resume", "r", "--root", str(root), "--no-metrics", "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["units_done_before"] == len(expand(load_campaign(campaign)))


def test_resume_refuses_another_campaign_and_unknown_runs(tmp_path):
    campaign = tiny(tmp_path)
    root = tmp_path / "runs"
    produce_run(campaign, root, "r")
    other = tmp_path / "other.yaml"
    other.write_text(campaign.read_text().replace("1024", "512"))
    with pytest.raises(StoreError, match="differs from the campaign run r started with"):
        resume_campaign("r", root=root, campaign_path=other, metrics=False, progress=False)
    with pytest.raises(StoreError, match="run_id: 'nope' not found"):
        resume_campaign("nope", root=root, metrics=False, progress=False)
    with pytest.raises(StoreError, match="already exists"):
        produce_run(campaign, root, "r")


def test_replay_serves_recorded_trials_then_goes_live_and_supersedes_the_rest():
    scenario = Scenario(frame_size=64)
    gen = SimGenerator(scenario, threshold=1e6)
    recorded = [gen.measure(5e5, 1.0), gen.measure(8e5, 1.0), gen.measure(9e5, 1.0)]
    superseded: list[str] = []
    live = LazyGenerator(SimGenerator, scenario, {"threshold": 1e6})
    replay = ReplayMeasurer(live, recorded, lambda rest: superseded.extend(t.trial_id for t in rest))
    assert replay.measure(5e5, 1.0) is recorded[0]
    assert replay.measure(8e5, 1.0) is recorded[1]
    assert live._gen is None                                   # no testbed set up while replaying
    fresh = replay.measure(7e5, 1.0)                           # the search asks for something else
    assert fresh.trial_id not in {t.trial_id for t in recorded}
    assert superseded == [recorded[2].trial_id]
    assert replay.replayed == {recorded[0].trial_id, recorded[1].trial_id}
    live.close()


# -- metrics ---------------------------------------------------------------------------------------
class _Gateway(BaseHTTPRequestHandler):
    """A fake Pushgateway: ready; PUTs succeed (``fail`` False) or answer 500. Records what it saw."""

    fail = False
    run_dir: Path | None = None
    seen: list[tuple[str, bool]] = []

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.send_response(503 if self.path.startswith("/prom") else 200)
        self.end_headers()

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        trial_id = self.path.rstrip("/").split("/")[-1]
        on_disk = any(trial_id in p.name for p in (self.run_dir / "trials").glob("*.parquet"))
        type(self).seen.append((trial_id, on_disk))
        self.send_response(500 if self.fail else 200)
        self.end_headers()
        if self.fail:
            self.wfile.write(b"storage full")


@pytest.fixture()
def gateway():
    handler = type("Gateway", (_Gateway,), {"seen": [], "fail": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _with_gateway(tmp_path: Path, url: str) -> Path:
    return tiny(tmp_path, metrics={"enabled": True, "pushgateway_url": url, "prometheus_url": url + "/prom"})


def test_each_trial_is_on_disk_before_it_is_pushed(tmp_path, gateway):
    handler, url = gateway
    handler.run_dir = tmp_path / "runs" / "p"
    out = produce_run(_with_gateway(tmp_path, url), tmp_path / "runs", "p", metrics=True)
    store = RunStore.open("p", tmp_path / "runs")
    ids = list(store.trials()["trial_id"])
    assert [t for t, _ in handler.seen] == ids
    assert all(on_disk for _, on_disk in handler.seen)
    assert store.pushed_trial_ids() == set(ids)
    assert out.metrics["pushed"] == len(ids) and out.metrics["push_failures"] == 0


def test_a_failing_pushgateway_does_not_stop_the_run(tmp_path, gateway):
    handler, url = gateway
    handler.fail = True
    handler.run_dir = tmp_path / "runs" / "p"
    said: list[str] = []
    out = run_campaign(_with_gateway(tmp_path, url), run_id="p", root=tmp_path / "runs", progress=False,
                       say=said.append)
    store = RunStore.open("p", tmp_path / "runs")
    assert out.status == "complete"
    assert len(store.trials()) > 3 and store.pushed_trial_ids() == set()
    assert out.metrics["push_failures"] == 3 and out.metrics["stopped_pushing"]
    assert len(handler.seen) == 3
    assert any("perfkit push --run p" in s and "HTTP 500" in s for s in said)
    assert store.metadata()["metrics"]["push_failures"] == 3


def test_unreachable_endpoints_mean_running_without_metrics(tmp_path):
    said: list[str] = []
    campaign = tiny(tmp_path, metrics={"pushgateway_url": "http://127.0.0.1:9", "prometheus_url": "http://127.0.0.1:9"})
    out = run_campaign(campaign, run_id="p", root=tmp_path / "runs", progress=False, say=said.append)
    assert out.status == "complete"
    assert any("not reachable" in s and "running without pushing" in s for s in said)


@pytest.mark.slow
def test_local_stack_is_started_used_and_stopped(tmp_path):
    from perfkit.metrics import stack

    stack_dir = tmp_path / "stack"
    campaign = tiny(tmp_path, frame_sizes=[1024], params={"direction": ["ul"]},
                    metrics={"enabled": True, "start_local": True, "stack_dir": str(stack_dir)},
                    methods=[{"method": "maxrate", "params": {"duration": 3.5}}])
    out = produce_run(campaign, tmp_path / "runs", "s", metrics=True)
    store = RunStore.open("s", tmp_path / "runs")
    assert "local stack started" in out.metrics["note"]
    assert store.pushed_trial_ids() == set(store.trials()["trial_id"])
    assert not stack.status(stack_dir).components, "the stack the run started is stopped again"


# -- two dataplanes side by side (parts with their own dataplane) ---------------------------------
SIDE_BY_SIDE = """
name: side
dataplane: pgwu
params: {direction: dl, sessions: 1}
frame_sizes: [64, 512]
flows: [1]
dut_cores: [1]
parts:
  - name: PGW-U
  - name: L4 LB
    dataplane: l4lb
    params: {protocol: udp}
generator:
  backend: sim
  options: {model: noisy, threshold: 1.2Mpps, sigma: 0.02, seed: 3}
methods:
  - method: ndr
    label: single
    params: {duration: 0.5, relative_width: 0.05}
  - method: bestworst
    params: {n: 3, duration: 0.5, relative_width: 0.05}
metrics: {enabled: false}
"""


def test_a_part_may_measure_another_dataplane():
    c = parse_campaign(SIDE_BY_SIDE)
    assert c.dataplanes == ("pgwu", "l4lb")
    by_dp = {}
    for sc in c.scenarios():
        by_dp.setdefault(sc.dataplane, []).append(sc)
    assert [s.frame_size for s in by_dp["pgwu"]] == [s.frame_size for s in by_dp["l4lb"]] == [64, 512]
    assert all(s.params["direction"] == "dl" for s in by_dp["pgwu"])
    # the L4 LB's part takes its own params only: the PGW-U's direction is not one of its parameters
    assert all(s.params["protocol"] == "udp" and "direction" not in s.params for s in by_dp["l4lb"])
    raw = yaml.safe_load(SIDE_BY_SIDE)
    raw["parts"][1]["dataplane"] = "nope"
    with pytest.raises(ConfigError, match=r"campaign\.parts\[1\]\.dataplane"):
        from_mapping(raw)
    raw["parts"][1] = {"dataplane": "l4lb", "params": {"direction": "ul"}}
    with pytest.raises(ConfigError, match=r"campaign\.parts\[1\]\.params"):
        from_mapping(raw)


def test_best_worst_and_single_run_per_frame_size_for_both_dataplanes(tmp_path):
    from perfkit import analysis, plots
    out = run_campaign(parse_campaign(SIDE_BY_SIDE), run_id="side", root=tmp_path, progress=False, say=lambda m: None)
    assert out.status == "complete"
    run = analysis.load_run("side", tmp_path)
    bw = analysis.best_worst_single(analysis.throughput_table(run))
    assert set(bw["dataplane"]) == {"pgwu", "l4lb"}
    for _, g in bw.groupby("scenario_key"):
        assert list(g["series"]) == ["best-of-N", "single run", "worst-of-N"]
        best, single, worst = g["throughput_pps"]
        assert worst <= best   # worst-of-N calls a rate good only after N good trials
    fig = plots.best_worst_bars(bw, run.title)
    assert {ax.get_title() for ax in fig.axes} >= {"pgwu: DL (GTP-U encap)", "l4lb: UDP (QUIC, :443)"}


# -- scenario keys: every parameter that differs from its default ------------------------------------
GRID = """
name: grid
dataplane: calib
params: {work_iterations: 10, drop_every: [0, 1000]}
frame_sizes: [64]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: smooth, threshold: 1.2Mpps}
methods:
  - method: maxrate
    params: {duration: 0.5}
metrics: false
"""


def _key_parts_without_drop_every(monkeypatch):
    """calib's key words as a plugin that forgot ``drop_every`` would give them (the work only)."""
    from perfkit.dataplanes.calib import CalibDataplane

    monkeypatch.setattr(CalibDataplane, "key_parts", lambda self, p: ([], [f"w{p['work_iterations']}"]))


def test_a_grid_over_a_parameter_no_key_word_names_gives_distinct_units(monkeypatch):
    _key_parts_without_drop_every(monkeypatch)
    ids = [u.id for u in expand(parse_campaign(GRID, cpus=2))]
    assert ids == ["calib-64B-1flow-1core-w10__maxrate", "calib-64B-1flow-1core-w10-drop_every1000__maxrate"]
    # the words of parameters a dataplane names are its own; a default parameter adds none
    assert Scenario("pgwu", params={"sessions": 100}).key == "pgwu-ul-64B-1flow-1core-100sess"
    assert Scenario("calib", params={"work_iterations": 10}).key == "calib-64B-1flow-1core-w10"


@pytest.mark.parametrize("params,word", [({"udp_csum": True}, "udp_csum"), ({"udp_csum": False}, "noudp_csum"),
                                         ({"session_table": "teid_array"}, "session_table_teid_array"),
                                         ({"sessions": 100}, "sessions100")])
def test_unnamed_parameters_are_words_of_their_name_and_value(monkeypatch, params, word):
    from perfkit.dataplane import Dataplane, Param
    from perfkit.dataplanes.pgwu import PgwuDataplane

    monkeypatch.setattr(PgwuDataplane, "key_parts", Dataplane.key_parts)   # the variant only
    if params.get("udp_csum") is False:   # a flag that is on by default
        defaults = tuple(Param(p.name, True, p.help, p.choices, p.kind, p.minimum, p.maximum, p.build)
                         if p.name == "udp_csum" else p for p in PgwuDataplane.params)
        monkeypatch.setattr(PgwuDataplane, "params", defaults)
    assert Scenario("pgwu", params=params).key == f"pgwu-ul-64B-1flow-1core-{word}"


def test_a_campaign_whose_expansion_repeats_a_unit_id_is_refused(monkeypatch, tmp_path, capsys):
    from perfkit.dataplanes.calib import CalibDataplane

    # key words that name drop_every, but not its value: 500 and 1000 give one key
    monkeypatch.setattr(CalibDataplane, "key_parts", lambda self, p: ([], ["drops"] if p["drop_every"] else []))
    text = GRID.replace("drop_every: [0, 1000]", "drop_every: [0, 500, 1000]")
    with pytest.raises(ConfigError, match=r"^campaign units: 'calib-64B-1flow-1core-drops-work_iterations10__maxrate' is not allowed; "
                                          r"allowed: distinct unit ids"):
        parse_campaign(text, cpus=2)
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--root", str(tmp_path / "runs"), "--no-metrics", "--no-progress"]) == 2
    assert "campaign units: 'calib-64B-1flow-1core-drops-work_iterations10__maxrate'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "no run was made"


def test_a_grid_over_an_unnamed_parameter_runs_and_compares_as_distinct_units(monkeypatch, tmp_path):
    from perfkit.analysis import load_run
    from perfkit.compare import compare_runs

    _key_parts_without_drop_every(monkeypatch)
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    produce_run(path, tmp_path / "runs", "grid")
    trials = RunStore.open("grid", tmp_path / "runs").trials()
    assert set(trials["scenario_key"]) == {"calib-64B-1flow-1core-w10", "calib-64B-1flow-1core-w10-drop_every1000"}
    assert dict(zip(trials["scenario_key"], trials["drop_every"])) == {"calib-64B-1flow-1core-w10": 0,
                                                                      "calib-64B-1flow-1core-w10-drop_every1000": 1000}
    run = load_run("grid", tmp_path / "runs")
    figures = compare_runs(run, run).rows
    assert sorted(set(figures["scenario_key"])) == sorted(set(trials["scenario_key"]))


@pytest.mark.slow   # two scenarios on the veth testbed: some 20 s
def test_a_grid_over_an_unnamed_parameter_runs_on_the_testbed_as_distinct_units(monkeypatch, tmp_path):
    _key_parts_without_drop_every(monkeypatch)
    raw = yaml.safe_load(GRID)
    raw["generator"] = {"backend": "xdp", "options": {}, "host_check_seconds": 1}
    raw["methods"] = [{"method": "maxrate", "params": {"duration": 0.5, "max_rate": "1Mpps"}}]
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(raw))
    produce_run(path, tmp_path / "runs", "grid")
    trials = RunStore.open("grid", tmp_path / "runs").trials()
    by_key = {k: g for k, g in trials.groupby("scenario_key")}
    assert set(by_key) == {"calib-64B-1flow-1core-w10", "calib-64B-1flow-1core-w10-drop_every1000"}
    drops = {k: [json.loads(d).get("drop_every", 0) for d in g["dut_drops"]] for k, g in by_key.items()}
    assert all(n == 0 for n in drops["calib-64B-1flow-1core-w10"])
    assert all(n > 0 for n in drops["calib-64B-1flow-1core-w10-drop_every1000"]), "the program dropped every 1000th"
    assert all(json.loads(o) for o in trials["objects"]), "every trial names the objects it loaded"
