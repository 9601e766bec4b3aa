"""``perfkit exporter``: the dataplanes' counters served to Prometheus while they are loaded.

The must-show (issue 27, item 3): during a trial on the testbed the local stack's real Prometheus
scrapes the L4 LB's per-VIP packet counter from the exporter, and its increase over the trial equals
what the sink received for that VIP.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from perfkit import dataplanes, plots
from perfkit.dataplanes.l4lb import L4lbDut
from perfkit.dataplanes.l4lb.config import L4lbConfig
from perfkit.dataplanes.l4lb.traffic import L4lbTraffic
from perfkit.generators.xdp import XdpGenerator
from perfkit.metrics import exporter
from perfkit.metrics.dpcounters import counter_increase, counter_rate_frame
from perfkit.metrics.promconfig import add_dataplane_job, targets_dir
from perfkit.scenario import Scenario
from tests.counting import RING, all_through
from tests.metrics_fixtures import running_stack

ROOT = Path(__file__).resolve().parent.parent
VIP_PACKETS = "perfkit_l4lb_vip_packets_total"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Descriptions of loaded dataplanes in a directory of the test's own."""
    d = tmp_path / "dataplanes"
    monkeypatch.setattr(exporter, "DUT_DIR", d)
    return d


def _exporter(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "perfkit", "exporter", "--json", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _series(text: str, metric: str) -> dict[str, float]:
    """``metric``'s series in an exposition text: labels -> value."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^{metric}{{(.*)}} (\S+)$", text, re.M)}


# -- the declarations --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", dataplanes.names())
def test_every_dataplane_declares_its_counters_by_the_naming_guide(name: str) -> None:
    dp = dataplanes.get(name)
    spec, dut = dp.bench_spec(128, dp.validate({}))
    try:
        specs = {s.name: s for s in dp.counter_specs()}
        cells = dut.counter_cells()
        assert cells and set(dut.map_ids()) == {c.map for c in cells}
        for s in specs.values():
            assert re.fullmatch(rf"perfkit_{name}_[a-z_]+_total", s.name), s.name
            assert s.unit in ("packets", "bytes") and s.name.endswith(f"_{s.unit}_total"), s.name
        for c in cells:   # every series belongs to a declared counter, with a value per label
            assert c.metric in specs and len(c.labels) == len(specs[c.metric].labels), c
        assert len({(c.metric, c.labels) for c in cells}) == len(cells)
        assert {"outcome"} <= {lab for s in specs.values() for lab in s.labels}
    finally:
        dut.close()


def test_the_lb_declares_vips_and_reals_and_the_pgwu_directions() -> None:
    lb = {s.name: s.labels for s in dataplanes.get("l4lb").counter_specs()}
    assert lb["perfkit_l4lb_vip_packets_total"] == ("vip",) and lb["perfkit_l4lb_real_bytes_total"] == ("real",)
    pgwu = {s.name: s.labels for s in dataplanes.get("pgwu").counter_specs()}
    assert pgwu["perfkit_pgwu_forwarded_packets_total"] == ("direction",)


# -- the command, without the testbed ----------------------------------------------------------------
def _lb(vips: int = 2) -> L4lbDut:
    traffic = L4lbTraffic(frame_size=128, flows=vips, vips=vips, reals=2, config=L4lbConfig(egress_ifindex=1))
    return L4lbDut(traffic, 1, 1, cpumap=False)


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_exporter_reads_the_maps_by_id_and_stops_once_the_dataplane_is_unloaded(tmp_path: Path) -> None:
    dut = _lb()
    desc = exporter.describe(dataplanes.get("l4lb"), dut, "t3st01")
    path = exporter.save(desc, tmp_path / "dut.json")
    targets = tmp_path / "targets"
    frame = dut.traffic.packet(1)   # flow 1: the second VIP
    for _ in range(5):
        assert dut.program.test_run(frame).verdict == "XDP_REDIRECT"
    proc = _exporter("--dut", str(path), "--register", str(targets))
    try:
        first = json.loads(proc.stdout.readline())
        assert first["url"].startswith("http://127.0.0.1:") and first["dataplane"] == "l4lb"
        target = json.loads((targets / "dataplane-t3st01.json").read_text())
        assert target[0]["targets"] == [first["url"].removeprefix("http://").removesuffix("/metrics")]
        text = requests.get(first["url"], timeout=5).text
        vips = _series(text, VIP_PACKETS)
        assert sorted(vips.values()) == [0.0, 5.0], text
        assert '# TYPE perfkit_l4lb_vip_packets_total counter' in text
        assert _series(text, "perfkit_l4lb_packets_total")['dataplane="l4lb",outcome="fwd",testbed="t3st01"'] == 5
        bytes_ = _series(text, "perfkit_l4lb_vip_bytes_total")
        assert sorted(bytes_.values()) == [0.0, 5.0 * len(frame)]
        for _ in range(3):   # read at scrape time: no stale value
            dut.program.test_run(frame)
        assert sorted(_series(requests.get(first["url"], timeout=5).text, VIP_PACKETS).values()) == [0.0, 8.0]
        dut.close()   # the dataplane unloaded: the exporter stops by itself, unregistered
        assert proc.wait(30) == 0
        assert not (targets / "dataplane-t3st01.json").exists()
    finally:
        dut.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_exporter_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    dut = _lb(1)
    try:
        path = exporter.save(exporter.describe(dataplanes.get("l4lb"), dut, "t3st02"), tmp_path / "dut.json")
        proc = _exporter("--dut", str(path), "--register", str(tmp_path))
        url = json.loads(proc.stdout.readline())["url"]
        assert (tmp_path / "dataplane-t3st02.json").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 130
        assert not (tmp_path / "dataplane-t3st02.json").exists()
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=2)
    finally:
        dut.close()


@pytest.mark.parametrize("listen", ["0.0.0.0:9435", "198.18.0.1:80", "127.0.0.1:http", "127.0.0.1"])
def test_exporter_serves_on_loopback_only(listen: str, tmp_path: Path) -> None:
    proc = _exporter("--listen", listen, "--dut", str(tmp_path / "none.json"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "listen" in err and listen in err and "loopback" in err


def test_exporter_without_a_loaded_dataplane_says_so(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "perfkit", "exporter"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PERFKIT_STATE_DIR": str(tmp_path)}, timeout=60)
    assert proc.returncode == 2 and "a testbed with a dataplane loaded" in proc.stderr, proc.stderr


def test_an_older_stack_config_gets_the_dataplane_job(tmp_path: Path) -> None:
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("# written by perfkit stack up\n" + yaml.safe_dump(
        {"global": {"scrape_interval": "1s"}, "scrape_configs": [{"job_name": "node"}]}))
    assert add_dataplane_job(cfg) and not add_dataplane_job(cfg)
    jobs = {j["job_name"]: j for j in yaml.safe_load(cfg.read_text())["scrape_configs"]}
    assert jobs["dataplane"]["file_sd_configs"][0]["files"] == [str(targets_dir(tmp_path) / "*.json")]
    assert cfg.read_text().startswith("# written by perfkit stack up\n")


# -- the must-show: Prometheus has the LB's per-VIP counter during a trial -------------------------
def _wait_for(prom: str, promql: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = requests.get(prom + "/api/v1/query", params={"query": promql}, timeout=5).json()["data"]["result"]
        if len(res) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus has no {promql} after {timeout} s")


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_prometheus_has_the_lbs_per_vip_counter_and_it_matches_the_sink(tmp_path: Path, state_dir: Path) -> None:
    with running_stack(tmp_path / "stack") as st:
        ep = st.endpoints()
        scenario = Scenario("l4lb", frame_size=128, flows=1, params={"vips": 2, "reals": 2})
        with XdpGenerator(scenario, exporter_targets=targets_dir(st.dir)) as gen:
            assert gen.export and gen.export.url
            assert (state_dir / f"{gen.testbed.rid}.json").exists()   # `perfkit exporter` finds it by hand too
            sel = f'testbed="{gen.testbed.rid}"'
            _wait_for(ep.prometheus_url, f'{VIP_PACKETS}{{{sel},job="dataplane"}}', 2)
            time.sleep(1.5 * ep.scrape_interval)   # a scrape before the trial: its starting value
            r = gen.measure(20000, 2.0)
            exporter_pid = gen.export.proc.pid if gen.export.proc else None
            assert r.rx_packets > 30000 and all_through(r, r.tx_packets), r.notes
            inc = counter_increase(ep, VIP_PACKETS, r.start_time, r.end_time, selector=sel)
            by_vip = dict(zip(inc["vip"], inc["increase"]))
            # flow 0 goes to the first VIP; the second has no client. The LB counts what reached it.
            assert by_vip == {"198.19.0.1:443/udp": r.tx_packets - r.dut_drops.get(RING, 0), "198.19.0.2:443/udp": 0}
            rates = counter_rate_frame(ep, VIP_PACKETS, r.start_time, r.end_time, selector=sel)
            busy = rates[rates["vip"] == "198.19.0.1:443/udp"]
            assert busy["rate"].max() > 5000 and busy["increase"].sum() >= r.rx_packets
            fig = plots.counter_rate(rates, "", (r.start_time, r.end_time))
            assert not plots.problems(fig) and "198.19.0.1:443/udp" in plots.describe(fig)
            # the exporter runs off the DUT core
            assert exporter_pid and not set(os.sched_getaffinity(exporter_pid)) & set(gen.dut_cores)
        # the testbed down: the exporter stopped, its target and the description removed
        assert not list(targets_dir(st.dir).glob("*.json")) and not list(state_dir.glob("*.json"))
        assert not Path(f"/proc/{exporter_pid}").exists()


# -- perfkit clean: the files of dead processes only -----------------------------------------------
_OWNER = """
import sys, time
from perfkit.metrics import exporter
desc = exporter.ExportedDut("l4lb", sys.argv[1], 1, {}, (), ())
exporter.save(desc, exporter.dut_path(sys.argv[1]))
exporter.register(sys.argv[2], desc, "127.0.0.1", 9)
print("ready", flush=True)
time.sleep(600)
"""


def test_clean_removes_the_descriptions_and_targets_of_dead_processes_only(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    state, targets = tmp_path / "state", tmp_path / "targets"
    env = {**os.environ, "PERFKIT_STATE_DIR": str(state)}
    monkeypatch.setattr(exporter, "DUT_DIR", state / "dataplanes")
    procs = {name: subprocess.Popen([sys.executable, "-c", _OWNER, name, str(targets)], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, text=True) for name in ("t3stdead", "t3stlive")}
    try:
        for p in procs.values():
            assert p.stdout and p.stdout.readline() == "ready\n"
        procs["t3stdead"].kill()   # a SIGKILLed generator or exporter: its clean-up never ran
        procs["t3stdead"].wait()
        files = {name: (state / "dataplanes" / f"{name}.json", targets / f"dataplane-{name}.json") for name in procs}
        assert all(f.exists() for pair in files.values() for f in pair)
        # Prometheus drops the owner's label (a __ label); the target stays a valid file_sd group
        assert json.loads(files["t3stlive"][1].read_text())[0]["targets"] == ["127.0.0.1:9"]
        removed = exporter.clean([targets])
        assert len(removed) == 2 and all("t3stdead" in r and f"pid {procs['t3stdead'].pid}" in r for r in removed)
        assert not any(f.exists() for f in files["t3stdead"]) and all(f.exists() for f in files["t3stlive"])
        assert exporter.clean([targets]) == []
        # on a lab host (no perfkit CLI there), the agent's clean removes the descriptions too
        procs["t3stlive"].kill()
        procs["t3stlive"].wait()
        out = subprocess.run([sys.executable, "-m", "perfkit.lab.agent", "--clean"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = [r for r in json.loads(out.stdout) if "t3stlive" in r]
        assert len(lines) == 1 and lines[0].startswith(f"dataplane description {files['t3stlive'][0]} "
                                                       f"(pid {procs['t3stlive'].pid} ")
        assert not files["t3stlive"][0].exists()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()


def test_a_lab_host_exporter_may_listen_on_the_address_its_lab_json_names_only(tmp_path: Path) -> None:
    from perfkit.cli.exporter import lab_config, parse_listen
    from perfkit.errors import ConfigError
    conf = tmp_path / "lab.json"
    conf.write_text(json.dumps({"host": "dut1", "address": "198.19.253.11", "exporter_port": 9435}))
    address = lab_config(str(conf))["address"]
    assert parse_listen("198.19.253.11:9435", address) == ("198.19.253.11", 9435)
    assert parse_listen("127.0.0.1:0", address) == ("127.0.0.1", 0)
    for other in ("198.19.253.12:9435", "0.0.0.0:9435"):
        with pytest.raises(ConfigError, match="the lab host's address 198.19.253.11"):
            parse_listen(other, address)
    with pytest.raises(ConfigError, match="loopback"):
        parse_listen("198.19.253.11:9435")


def test_with_a_web_config_the_exporter_serves_only_its_users(tmp_path: Path) -> None:
    """A lab's DUT host serves on its management address with the lab's basic auth, read from the
    web config node-exporter reads: no or wrong credentials get 401 and a challenge, the user gets
    the series."""
    import bcrypt
    web = tmp_path / "web-config.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"perfkit": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()}}))
    dut = _lb()
    path = exporter.save(exporter.describe(dataplanes.get("l4lb"), dut, "t3stauth"), tmp_path / "dut.json")
    dut.program.test_run(dut.traffic.packet(1))
    proc = _exporter("--dut", str(path), "--web-config", str(web))
    try:
        first = json.loads(proc.stdout.readline())
        assert first["basic_auth"] is True
        none = requests.get(first["url"], timeout=5)
        assert none.status_code == 401 and none.headers["WWW-Authenticate"].startswith("Basic ")
        for user, password in (("perfkit", "wrong"), ("other", "s3cret")):
            assert requests.get(first["url"], auth=(user, password), timeout=5).status_code == 401
        for _ in range(2):   # the second time from the remembered check
            good = requests.get(first["url"], auth=("perfkit", "s3cret"), timeout=5)
            assert good.status_code == 200 and sorted(_series(good.text, VIP_PACKETS).values()) == [0.0, 1.0]
    finally:
        dut.close()
        proc.wait(30)


@pytest.mark.parametrize("text", ["basic_auth_users: {perfkit: not-a-hash}\n", "tls_server_config: {cert_file: x}\n",
                                  "[1, 2]\n"])
def test_a_web_config_that_is_not_one_is_exit_2_naming_it(text: str, tmp_path: Path) -> None:
    web = tmp_path / "web-config.yml"
    web.write_text(text)
    out = subprocess.run([sys.executable, "-m", "perfkit", "exporter", "--dut", str(tmp_path / "none.json"),
                          "--web-config", str(web)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert f"web-config: '{web}' is not allowed; allowed: a web config file with basic_auth_users" in out.stderr
