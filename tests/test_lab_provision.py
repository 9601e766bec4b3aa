"""Provisioning a lab (``perfkit lab provision``), and the lab of namespace hosts it is tested on.

The fast tests check the plan each host gets, the host-side steps (``perfkit.lab.hostsetup``) with
real servers and the sandbox's own life cycle. The ``lab`` tests (``make test-lab``) provision a
four-host sandbox (DUT, two testers, metrics: namespaces with their own sshd) with the real
``ansible-playbook`` over real SSH, twice.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from perfkit import owners
from perfkit.lab import hostsetup, provision, sandbox
from perfkit.lab.inventory import load
from perfkit.lab.sandbox import Sandbox
from perfkit.metrics.servers import free_port

ROOT = Path(__file__).resolve().parents[1]


def _ssh(sb: Sandbox, host: str, command: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", "/dev/null", "-i", str(key or sb.key), "-o", f"UserKnownHostsFile={sb.known_hosts}",
                           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                           "-o", "ConnectTimeout=5", f"root@{sb.address(host)}", command],
                          capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    with Sandbox(tmp_path_factory.mktemp("lab")) as sb:
        yield sb


# -- the sandbox -----------------------------------------------------------------------------------
def test_sandbox_hosts_are_namespaces_reached_over_ssh_with_the_key_only(lab: Sandbox, tmp_path: Path) -> None:
    out = _ssh(lab, "dut1", "ip -o link show; cat /proc/self/net/dev | wc -l")
    assert out.returncode == 0, out.stderr
    assert " a0@" in out.stdout and " b1@" in out.stdout and "02:00:00:53:00:00" in out.stdout
    assert "p0" not in out.stdout            # the tester's ends are in the tester's namespace
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    refused = _ssh(lab, "dut1", "true", key=stranger)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
    hosts = load(lab.inventory)
    assert [h.name for h in hosts.hosts] == ["dut1", "tester1", "tester2", "metrics1"]
    assert [i.peer for i in hosts.dut.interfaces] == ["tester1:p0", "tester1:p1", "tester2:p0", "tester2:p1"]


def test_a_dead_owners_sandbox_is_cleaned_and_a_live_ones_is_not(lab: Sandbox, tmp_path: Path) -> None:
    assert lab.rid in sandbox.owned_by_live() and sandbox.clean() == []
    code = ("import os, sys; from perfkit.lab.sandbox import Sandbox\n"
            f"sb = Sandbox({str(tmp_path / 'dead')!r}).up(); print(sb.rid, flush=True); os.kill(os.getpid(), 9)")
    # a second sandbox is refused while one is up: bring the fixture's down for this test's one
    lab.down()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        rid = proc.stdout.strip()
        assert proc.returncode == -signal.SIGKILL and rid in sandbox.running()
        pids = [p for ns in os.listdir("/run/netns") if ns.startswith(f"pkl{rid}-") for p in sandbox.pids_in(ns)]
        assert pids, "the dead owner's sshds should still run"
        removed = sandbox.clean()
        assert f"bridge pkl{rid}" in removed and any(r.startswith(f"netns pkl{rid}-dut1") for r in removed)
        assert rid not in sandbox.running()
        assert not any(owners.proc_start(p) for p in pids)   # gone, or a zombie its new parent has not reaped
    finally:
        lab.up()


# -- the plan and Ansible's output -----------------------------------------------------------------
def test_each_host_gets_what_its_roles_need(lab: Sandbox) -> None:
    hosts = load(lab.inventory)
    plans = {h.name: provision.host_plan(hosts, h) for h in hosts.hosts}
    assert plans["dut1"]["bpf"] and "linux-perf" in plans["dut1"]["packages"]
    assert plans["dut1"]["nic"] == {"interfaces": ["a0", "b0", "a1", "b1"], "cores": [1]}
    assert not plans["metrics1"]["bpf"] and plans["metrics1"]["nic"] is None
    assert [d["name"] for d in plans["metrics1"]["daemons"]] == ["node-exporter", "pushgateway", "prometheus"]
    for name, plan in plans.items():
        exporter = plan["daemons"][0]
        assert exporter["argv"][1] == f"--web.listen-address={lab.address(name)}:9100"
        assert exporter["pidfile"].startswith(str(lab.root(name)))
    assert json.loads(plans["dut1"]["files"][0]["content"])["interfaces"] == ["a0", "b0", "a1", "b1"]
    config = plans["metrics1"]["files"][1]["content"]
    for name in ("dut1", "tester1", "tester2", "metrics1"):
        assert f"{lab.address(name)}:9100" in config and f"host: {name}" in config
    # the DUT host's agent serves its dataplane's counters where node-exporter serves, on port 9435
    dut_conf = json.loads(plans["dut1"]["files"][0]["content"])
    assert (dut_conf["address"], dut_conf["exporter_port"]) == (lab.address("dut1"), 9435)
    assert "address" not in json.loads(plans["tester1"]["files"][0]["content"])
    jobs = {j["job_name"]: j for j in yaml.safe_load(config)["scrape_configs"]}
    assert jobs["dataplane"]["static_configs"] == [{"targets": [f"{lab.address('dut1')}:9435"], "labels": {"host": "dut1"}}]


def test_the_metrics_stack_asks_for_basic_auth_and_its_password_stays_secret(lab: Sandbox) -> None:
    import bcrypt
    hosts = load(lab.inventory)
    password = lab.metrics_password
    assert hosts.metrics_auth == ("perfkit", password)
    assert password not in repr(hosts) and password not in json.dumps(hosts.to_dict())
    plans = {h.name: provision.host_plan(hosts, h) for h in hosts.hosts}
    for name, plan in plans.items():
        web = next(s for s in plan["secrets"] if s["path"].endswith("web-config.yml"))
        digest = yaml.safe_load(web["content"])["basic_auth_users"]["perfkit"]
        assert bcrypt.checkpw(password.encode(), digest.encode()) and not bcrypt.checkpw(b"guess", digest.encode())
        assert all(f"--web.config.file={web['path']}" in d["argv"] for d in plan["daemons"])
        assert password not in json.dumps(plan["files"]) and password not in json.dumps(plan["daemons"])
    # the same hash on every provisioning, so a second run changes no file
    assert provision.host_plan(hosts, hosts.dut) == plans["dut1"]
    scrape = yaml.safe_load(plans["metrics1"]["files"][1]["content"])
    assert {j["job_name"]: j["basic_auth"]["username"] for j in scrape["scrape_configs"]} == {
        "node": "perfkit", "pushgateway": "perfkit", "dataplane": "perfkit"}
    assert [s["content"] for s in plans["metrics1"]["secrets"] if s["path"] == scrape["scrape_configs"][0]["basic_auth"]
            ["password_file"]] == [password]


def test_the_recap_and_unreachable_hosts_are_read_from_ansible_output(lab: Sandbox) -> None:
    out = ("fatal: [tester2]: UNREACHABLE! => {\"changed\": false, \"msg\": \"Failed to connect to the host via ssh: "
           "ssh: connect to host 198.19.253.99 port 22: No route to host\", \"unreachable\": true}\n"
           "PLAY RECAP *****\n"
           "dut1                       : ok=15   changed=0    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0\n"
           "tester2                    : ok=0    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0\n")
    recap = provision.parse_recap(out)
    assert [(r.host, r.ok, r.changed, r.unreachable) for r in recap] == [("dut1", 15, 0, 0), ("tester2", 0, 0, 1)]
    lines = provision.unreachable(out, load(lab.inventory))
    assert lines == [f"host tester2 ({lab.address('tester2')}:22) is unreachable: Failed to connect to the host via ssh: "
                     "ssh: connect to host 198.19.253.99 port 22: No route to host"]


def test_the_source_archive_is_the_checkouts_files_byte_for_byte(tmp_path: Path) -> None:
    sid, path = provision.source_tarball(tmp_path)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert sid.startswith(head)
    data = path.read_bytes()
    path.unlink()
    assert provision.source_tarball(tmp_path) == (sid, path) and path.read_bytes() == data
    import tarfile
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
    assert {"Makefile", "perfkit/lab/provision.py", "perfkit/lab/playbooks/provision.yml"} <= names
    assert not any(n.startswith((".venv/", "build/", "data/runs/")) for n in names)


# -- steps on a host -------------------------------------------------------------------------------
def test_a_server_is_started_once_and_restarted_when_its_command_line_changes(tmp_path: Path) -> None:
    pidfile = tmp_path / "run" / "ne.pid"
    pidfile.parent.mkdir()
    argv = ["/usr/bin/prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{free_port('127.0.0.1')}",
            "--collector.disable-defaults", "--collector.loadavg"]
    try:
        assert hostsetup.daemon(True, "ne", pidfile, argv, None) == ["started ne"] and not pidfile.exists()
        assert hostsetup.daemon(False, "ne", pidfile, argv, None) == ["started ne"]
        first = json.loads(pidfile.read_text())["pid"]
        assert hostsetup.daemon(False, "ne", pidfile, argv, None) == []
        assert hostsetup.daemon(True, "ne", pidfile, argv[:-1] + ["--collector.time"], None) == \
            ["restarted ne (command line or configuration changed)"]
        assert json.loads(pidfile.read_text())["pid"] == first
        assert hostsetup.daemon(False, "ne", pidfile, argv[:-1] + ["--collector.time"], None)
        second = json.loads(pidfile.read_text())["pid"]
        assert second != first and not hostsetup._alive(first, argv[0]) and hostsetup._alive(second, argv[0])
    finally:
        state = hostsetup._read_pidfile(pidfile)
        if state:
            os.kill(state["pid"], signal.SIGTERM)


def test_the_nic_step_on_a_veth_changes_nothing_it_should_not(lab: Sandbox) -> None:
    out = _ssh(lab, "dut1", f"{ROOT}/.venv/bin/python -c 'from perfkit.lab import hostsetup; "
               "print(hostsetup.nic(False, [\"a0\", \"b0\"], [1]), hostsetup.facts([\"a0\"])[\"interfaces\"])'")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[] ") and "'driver': 'veth'" in out.stdout


# -- the lab tests: the real ansible-playbook over SSH ---------------------------------------------
def _prometheus_up(address: str, password: str, job: str = 'job!="dataplane"') -> dict[str, str]:
    import requests
    r = requests.get(f"http://{address}:9090/api/v1/query", params={"query": f"up{{{job}}}"},
                     auth=("perfkit", password), timeout=5)
    r.raise_for_status()
    data = r.json()
    return {res["metric"].get("host", res["metric"]["job"]): res["value"][1] for res in data["data"]["result"]}


@pytest.mark.lab
def test_provisioning_sets_the_lab_up_and_a_second_run_changes_nothing(lab: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main
    first = provision.provision(lab.inventory)
    assert first.returncode == 0 and not first.unreachable
    assert {r.host: (r.failed, r.unreachable) for r in first.recap} == {h: (0, 0) for h in ("dut1", "tester1", "tester2", "metrics1")}
    assert all(r.changed > 0 for r in first.recap)
    for name in ("dut1", "tester1", "tester2"):
        assert (lab.root(name) / "opt/perfkit/current/build/bpf/pgwu.o").exists()
    assert first.facts["dut1"]["interfaces"]["a0"]["driver"] == "veth"
    assert first.facts["dut1"]["kernel"] == os.uname().release
    deadline = time.monotonic() + 15
    while (up := _prometheus_up(lab.address("metrics1"), lab.metrics_password)) != {"dut1": "1", "tester1": "1", "tester2": "1", "metrics1": "1",
                                                               "pushgateway": "1"} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert up == {"dut1": "1", "tester1": "1", "tester2": "1", "metrics1": "1", "pushgateway": "1"}
    # the DUT host's dataplane exporter is a target too; it serves only while a dataplane is loaded
    while not _prometheus_up(lab.address("metrics1"), lab.metrics_password, 'job="dataplane"') and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _prometheus_up(lab.address("metrics1"), lab.metrics_password, 'job="dataplane"') == {"dut1": "0"}
    # every server of the stack asks for the password (Prometheus scraped with it: all up above)
    for name, port in (("metrics1", 9090), ("metrics1", 9091), ("dut1", 9100)):
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"http://{lab.address(name)}:{port}/metrics", timeout=5)
    assert not (provision.BUILD_ROOT / "lab" / "provision-vars.json").exists()   # the password is not left behind

    assert main(["lab", "provision", "-i", str(lab.inventory), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["changed"] == 0 and second["returncode"] == 0
    assert {r["host"]: r["changed"] for r in second["recap"]} == {h: 0 for h in ("dut1", "tester1", "tester2", "metrics1")}
    assert main(["lab", "provision", "-i", str(lab.inventory), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] == 0


@pytest.mark.lab
def test_an_unreachable_host_is_refused_in_one_line(lab: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main
    bad = tmp_path / "bad.yml"
    bad.write_text(lab.inventory.read_text().replace(f"ansible_host: {lab.address('tester2')}", "ansible_host: 198.19.253.99"))
    assert main(["lab", "provision", "-i", str(bad), "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perfkit: error: host tester2 (198.19.253.99:22) is unreachable: ")
    assert "No route to host" in err[0] or "timed out" in err[0]
