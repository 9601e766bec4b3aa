"""The local stack with the real binaries: up, status, down, failures that say why."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics import servers, stack
from perfkit.metrics.config import load_endpoints
from tests.metrics_fixtures import free_ports, running_stack, start_stack, wait_for_targets



def _alive(pid: int) -> bool:
    return servers.proc_start(pid) is not None


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")


def _procs_of(d: Path) -> list[int]:
    """Pids of live processes whose command line mentions the stack directory ``d``."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if str(d) in (p / "cmdline").read_text() and _alive(int(p.name)):
                    out.append(int(p.name))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def test_up_status_down(tmp_path):
    d = tmp_path / "stack"
    try:
        st = start_stack(d)
        assert st.healthy and st.started == ["node-exporter", "pushgateway", "prometheus"]
        # up returns once Prometheus has scraped both targets: a trial right after it is measured
        targets = requests.get(st.component("prometheus").url + "/api/v1/targets", timeout=5).json()
        assert {t["labels"]["job"]: t["health"] for t in targets["data"]["activeTargets"]} == \
            {"node": "up", "pushgateway": "up"}
        for c in st.components:
            assert _alive(c.pid)
            assert f"127.0.0.1:{c.port}" in _cmdline(c.pid)       # bound to loopback only
            assert c.url == f"http://127.0.0.1:{c.port}"
        cfg = yaml.safe_load((d / "prometheus.yml").read_text())
        assert cfg["global"]["scrape_interval"] == "1s"
        jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
        assert jobs["pushgateway"]["honor_labels"] is True
        assert jobs["node"]["static_configs"][0]["targets"] == [f"127.0.0.1:{st.component('node-exporter').port}"]
        # node-exporter serves the CPU counters
        text = requests.get(st.component("node-exporter").url + "/metrics", timeout=5).text
        assert 'node_cpu_seconds_total{cpu="0",mode="softirq"}' in text
        # status agrees; a second up is a no-op
        again = stack.up(d)
        assert again.started == [] and [c.pid for c in again.components] == [c.pid for c in st.components]
        assert stack.status(d).healthy
        # endpoints.json lets every other command find this stack
        ep = load_endpoints(stack_dir=d, env={})
        assert ep.prometheus_url == st.component("prometheus").url
        assert ep.pushgateway_url == st.component("pushgateway").url
        pids = [c.pid for c in st.components]
    finally:
        stack.down(d)
    assert not any(_alive(p) for p in pids)
    assert stack.status(d).components == []
    assert not (d / "endpoints.json").exists()
    for c in st.components:                       # ports released (the kernel may take a moment)
        assert _released("127.0.0.1", c.port), f"{c.name} still holds port {c.port}"
    assert (d / "logs" / "prometheus.log").stat().st_size > 0     # data and logs stay


def _released(host: str, port: int, wait: float = 5.0) -> bool:
    deadline = time.monotonic() + wait
    while servers.port_in_use(host, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_down_one_component_and_up_restarts_only_it_on_the_same_port(tmp_path):
    d = tmp_path / "stack"
    with running_stack(d) as st:
        pgw = st.component("pushgateway")
        out = stack.down(d, components=["pushgateway"])
        assert out.started == ["pushgateway"] and not _alive(pgw.pid)
        now = stack.status(d)
        assert not now.healthy and now.component("pushgateway").detail == "stopped"
        assert now.component("prometheus").running
        with pytest.raises(ConfigError, match="pushgateway port"):
            stack.up(d, pushgateway_port=pgw.port + 1)
        healed = stack.up(d)
        assert healed.started == ["pushgateway"] and healed.healthy
        assert healed.component("pushgateway").port == pgw.port
        assert healed.component("prometheus").pid == st.component("prometheus").pid


def test_down_kills_only_the_pids_it_recorded(tmp_path):
    d = tmp_path / "stack"
    # a state whose pid now belongs to some other process (pid recycled): must be left alone
    other = subprocess.Popen(["sleep", "60"])
    try:
        d.mkdir(exist_ok=True)
        real_start = servers.proc_start(other.pid)
        state = {"host": "127.0.0.1", "components": {"prometheus": {
            "pid": other.pid, "start_ticks": real_start - 1, "port": 1, "argv": ["prometheus"],
            "log": "", "url": "http://127.0.0.1:1"}}}
        (d / "state.json").write_text(json.dumps(state))
        out = stack.down(d)
        assert out.started == []
        assert "left alone" in out.component("prometheus").detail
        assert other.poll() is None and _alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_port_in_use_is_reported_from_the_servers_log(tmp_path):
    d = tmp_path / "stack"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        prom, node = free_ports(2)
        with pytest.raises(MetricsError) as e:
            stack.up(d, prometheus_port=prom, pushgateway_port=port, node_exporter_port=node)
    msg = str(e.value)
    assert "pushgateway exited during start" in msg
    assert f"port {port} on 127.0.0.1 is in use" in msg
    assert "pushgateway.log" in msg
    assert _procs_of(d) == []                  # node-exporter, already started, was stopped again
    assert not (d / "state.json").exists()


def test_bad_flag_value_is_reported_from_the_log(tmp_path):
    d = tmp_path / "stack"
    with pytest.raises(MetricsError) as e:
        start_stack(d, retention="forever")
    assert "prometheus exited during start" in str(e.value)
    assert "forever" in str(e.value)
    assert _procs_of(d) == []


def test_missing_binary_names_the_package(tmp_path):
    d = tmp_path / "stack"
    with pytest.raises(MetricsError) as e:
        start_stack(d, binaries={"pushgateway": str(tmp_path / "no-such-pushgateway")})
    msg = str(e.value)
    assert "pushgateway: binary" in msg and "not found" in msg
    assert "install the Debian package prometheus-pushgateway" in msg
    assert _procs_of(d) == []


def test_bad_host_and_component_names(tmp_path):
    with pytest.raises(ConfigError, match="host: 'http://x' is not allowed"):
        stack.up(tmp_path, "http://x")
    with pytest.raises(ConfigError, match="component: 'grafana' is not allowed"):
        stack.down(tmp_path, components=["grafana"])


@pytest.mark.slow   # make test keeps test_up_status_down (the same through the Python API)
def test_cli_up_status_down(tmp_path, perfkit_script):
    d = tmp_path / "stack"
    prom, pgw, node = free_ports(3)
    env = {**os.environ, "PERFKIT_DATA": str(tmp_path / "data")}

    def perfkit(*args: str) -> subprocess.CompletedProcess:
        """``.venv/bin/perfkit stack ...`` (forked: ``tests/script_forks.py``)."""
        return perfkit_script.run(["stack", *args, "--stack-dir", str(d)], env=env, timeout=120)

    try:
        up = perfkit("up", "--prometheus-port", str(prom), "--pushgateway-port", str(pgw),
                     "--node-exporter-port", str(node), "--json")
        assert up.returncode == 0, up.stderr
        st = json.loads(up.stdout)
        assert st["healthy"] and {c["port"] for c in st["components"]} == {prom, pgw, node}
        status = perfkit("status", "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["healthy"]
        human = perfkit("status")
        assert "healthy" in human.stdout and f"http://127.0.0.1:{prom}" in human.stdout
        wait_for_targets(stack.status(d))
    finally:
        down = perfkit("down", "--json")
    assert down.returncode == 0, down.stderr
    stopped = json.loads(down.stdout)
    assert sorted(stopped["started"]) == ["node-exporter", "prometheus", "pushgateway"]
    assert not any(_alive(c["pid"]) for c in stopped["components"])
    status = perfkit("status")
    assert status.returncode == 2 and "no stack recorded" in status.stdout
    clash = perfkit("up", "--prometheus-port", str(prom), "--pushgateway-port", str(prom))
    assert clash.returncode == 2 and "perfkit: error: ports" in clash.stderr
