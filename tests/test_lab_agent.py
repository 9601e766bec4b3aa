"""``perfkit agent`` on a lab host, reached over SSH (``perfkit.lab.agent``, ``perfkit.lab.remote``).

The fast tests speak the protocol to an agent in this process. The ``lab`` tests (``make
test-lab``) provision the four-host sandbox once and reach its DUT's agent over real SSH: the
dataplane loaded on the inventory's interfaces forwards frames a tester host sends (exact counts,
0 mismatches); an interface the inventory does not name and an unreachable host are refused in one
line; and whatever ends the session (the controller killed, the SSH session cut, the agent killed
and ``perfkit clean`` run on the host) leaves no XDP program on the DUT within 10 s. Users'
dataplanes run campaigns there too: a description file (shipped by op ``describe``, built on the
DUT host, or attached by its own loader: xdp-filter) and a plugin installed in the hosts' virtualenvs.
"""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from perfkit import owners
from perfkit.errors import PerfkitError
from perfkit.lab import agent as agent_mod
from perfkit.lab import provision
from perfkit.lab.agent import Agent
from perfkit.lab.inventory import Lab, load
from perfkit.lab.remote import AgentSession
from perfkit.lab.sandbox import Sandbox
from perfkit.metrics.config import Endpoints
from perfkit.scenario import Scenario
from perfkit.testbed import netns
from perfkit.testbed.sink import Sink


# -- the protocol ----------------------------------------------------------------------------------
def _ask(agent: Agent, *requests: object) -> list[dict]:
    out = io.StringIO()
    agent_mod.serve(agent, io.StringIO("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests)), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_agent_runs_only_what_the_protocol_defines(tmp_path: Path) -> None:
    agent = Agent({"host": "dut1", "interfaces": ["a0", "b0"], "source_id": "abc"})
    answers = _ask(agent, "not json", {"id": 1, "op": "exec", "args": {"cmd": "rm -rf /"}},
                   {"id": 2, "op": "counters"}, {"id": 3, "op": "load", "args": {"dataplane": "pgwu", "frame_size": 64,
                                                                                 "flows": 1, "interfaces": ["a0", "eth9"]}},
                   {"id": 4, "op": "load", "args": {"bogus": 1}}, {"id": 5, "op": "bye"}, {"id": 6, "op": "hello"})
    assert [a["ok"] for a in answers] == [False, False, False, False, False, True]   # nothing after bye
    assert answers[0]["error"].startswith("request: not a JSON object")
    assert answers[1]["error"] == ("op: 'exec' is not one of hello, describe, load, counters, begin, end, perf_start, perf_stop, "
                                   "tester, send, unload, bye")
    assert answers[2]["error"] == "host dut1: no dataplane is loaded"
    assert answers[3]["error"] == ("interface of host dut1: 'eth9' is not allowed; allowed: an interface the "
                                   "inventory names for it: a0, b0")
    assert answers[4]["error"].startswith("args of load: ")
    bad = _ask(agent, {"id": 1, "op": "load", "args": {"dataplane": "pgwu", "frame_size": 64, "flows": 1,
                                                       "interfaces": ["a0", "b0"], "macs": [{"a": "02:00:00:00:01"}]}})
    assert bad[0]["error"] == "macs.a: '02:00:00:00:01' is not allowed; allowed: a MAC address, e.g. 02:00:00:00:01:01"


# -- a description, shipped through the protocol ----------------------------------------------------
DESCRIBED = Path(__file__).resolve().parent / "describe"


def _description(d: Path, **attach: str) -> Path:
    """tests/describe's NF in ``d`` (outside the tree), with ``attach`` (setup, teardown) if given."""
    import shutil
    import yaml
    for f in ("mynf.bpf.c", "udp.py", "mynf_model.py"):
        shutil.copy(DESCRIBED / f, d / f)
    desc = yaml.safe_load((DESCRIBED / "mynf.dataplane.yaml").read_text())
    if attach:   # the NF's loader sets its globals (test_describe.by_setup)
        desc["attach"] = attach
        desc["config"].pop("globals")
        desc["config"].pop("python")
    path = d / "mynf.dataplane.yaml"
    path.write_text(yaml.safe_dump(desc))
    return path


def test_a_description_loads_only_as_the_agent_received_it_and_its_commands_name_inventory_interfaces(
        tmp_path: Path) -> None:
    from perfkit import describe
    from perfkit.lab.descriptions import command_interfaces, pack
    src = tmp_path / "nf"
    src.mkdir()
    (src / "notes.txt").write_text("the NF's own notes\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: x\n")
    packed = pack(describe.read(_description(src)))
    assert sorted(packed["files"]) == ["mynf.bpf.c", "mynf.dataplane.yaml", "mynf_model.py", "notes.txt", "udp.py"]
    agent = Agent({"host": "dut1", "interfaces": ["a0", "b0"]}, tmp_path / "dut1" / "etc" / "lab.json")
    what = {"frame_size": 64, "flows": 1, "interfaces": ["a0", "b0"]}
    [own, bad, got, again] = _ask(agent, {"id": 1, "op": "load", "args": {"dataplane": str(src / "mynf.dataplane.yaml"), **what}},
                                  {"id": 2, "op": "describe", "args": {"description": "mynf.dataplane.yaml",
                                                                       "files": {"../x.py": "", **packed["files"]}}},
                                  {"id": 3, "op": "describe", "args": packed}, {"id": 4, "op": "describe", "args": packed})
    assert own["error"].startswith(f"dataplane of host dut1: '{src}/mynf.dataplane.yaml' is not allowed; allowed: a "
                                   "dataplane installed on it (")   # a path of the host's own: not loaded
    assert bad["error"] == ("describe.files: '../x.py' is not allowed; allowed: a path relative to the "
                            "description's directory, without ..")
    host_path = Path(got["result"]["dataplane"])
    assert got["result"]["name"] == "mynf" and again["result"] == got["result"]   # the same files, once
    assert host_path.parent.parent == tmp_path / "dut1" / "dataplanes" and host_path.read_text() == \
        (src / "mynf.dataplane.yaml").read_text()
    assert not (host_path.parent / ".git").exists()
    # an NF's own loader may name only the inventory's interfaces of the host
    packed = pack(describe.read(_description(src, setup="ip link set dev {dev_a} xdp obj {object} && ip link set lo up",
                                             teardown="ip link set dev {dev_a} xdp off")))
    [got, refused] = _ask(agent, {"id": 5, "op": "describe", "args": packed},
                          {"id": 6, "op": "load", "args": {**what, "dataplane": "{dataplane}"}})
    refused = _ask(agent, {"id": 7, "op": "load", "args": {**what, "dataplane": got["result"]["dataplane"]}})[0]
    assert refused["error"] == ("mynf.dataplane.yaml: attach.setup: interface of host dut1: 'lo' is not allowed; "
                                "allowed: an interface the inventory names for it: a0, b0")
    assert command_interfaces("xdp-filter load -m native {dev_a} && tc qdisc add dev=eth9,a0", ["eth9", "a0"]) == \
        ["eth9", "a0"]


# -- over SSH --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Lab]]:
    with Sandbox(tmp_path_factory.mktemp("lab")) as sb:
        result = provision.provision(sb.inventory)
        assert result.returncode == 0, result.recap
        yield sb, load(sb.inventory)


def _xdp_left(sb: Sandbox, host: str) -> int:
    """Interfaces of ``host`` with an XDP program attached."""
    out = subprocess.run(["ip", "netns", "exec", sb.ns(host), "ip", "-o", "link", "show"], capture_output=True,
                         text=True).stdout
    return sum("prog/xdp" in line for line in out.splitlines())


def _gone_within(sb: Sandbox, seconds: float) -> float:
    """Seconds until the DUT host has no XDP program; fails after ``seconds``."""
    start = time.monotonic()
    while _xdp_left(sb, "dut1"):
        assert time.monotonic() - start < seconds, "an XDP program is left on the DUT"
        time.sleep(0.05)
    return time.monotonic() - start


def _send_and_receive(sb: Sandbox, scenario: Scenario, count: int) -> tuple[int, list[bytes]]:
    """``count`` frames of the scenario sent from tester1's p0 (a raw socket); the frames perfkit's
    sink counted at its p1, and those it captured."""
    traffic = scenario.traffic()
    ns = sb.ns("tester1")
    sink = Sink(capture_max=64)
    try:
        sink.attach(ns, netns.ifindex(ns, "p1"))
        sink.reset(64)
        with netns.inside(ns):
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx.bind(("p0", 0))
        with tx:
            for i in range(count):
                tx.send(traffic.packet(flow=i % scenario.flows, seq=i))
        last, quiet = -1, time.monotonic()
        while time.monotonic() - quiet < 0.3:
            if sink.totals()[0] != last:
                last, quiet = sink.totals()[0], time.monotonic()
            time.sleep(0.02)
        return sink.read().packets, [c.data for c in sink.captures()]
    finally:
        sink.close()


@pytest.mark.lab
def test_the_dut_agent_forwards_exactly_what_a_tester_host_sends(lab: tuple[Sandbox, Lab]) -> None:
    sb, hosts = lab
    scenario = Scenario(dataplane="pgwu", frame_size=128, flows=4)
    with AgentSession(hosts.dut) as dut:
        assert dut.hello["host"] == "dut1" and dut.hello["facts"]["interfaces"]["a0"]["driver"] == "veth"
        loaded = dut.call("load", dataplane="pgwu", frame_size=128, flows=4, interfaces=["a0", "b0"], cores=[1])
        assert loaded["mode"] == "native" and loaded["packet_threads"]
        assert [len(h) for h in loaded["objects"].values()] == [64], "the hash of the object the DUT host loaded"
        before = dut.call("counters")
        received, frames = _send_and_receive(sb, scenario, 500)
        after = dut.call("counters")
    assert received == 500 and len(frames) == 64
    assert [why for f in frames if (why := scenario.dp.check_output(scenario.traffic(), f))] == []
    fwd = {k: after["counters"][k] - before["counters"][k] for k in after["counters"]}
    assert fwd["ul_fwd"] == 500 and sum(fwd.values()) == 500
    assert _gone_within(sb, 10) < 1   # bye unloaded it


@pytest.mark.lab
def test_an_interface_the_inventory_does_not_name_is_refused(lab: tuple[Sandbox, Lab]) -> None:
    sb, hosts = lab
    with AgentSession(hosts.dut) as dut:
        with pytest.raises(PerfkitError) as err:
            dut.call("load", dataplane="pgwu", frame_size=128, flows=1, interfaces=["a0", "mgmt0"])
    assert str(err.value) == ("interface of host dut1: 'mgmt0' is not allowed; allowed: an interface the inventory "
                              "names for it: a0, b0, a1, b1")
    assert not _xdp_left(sb, "dut1")


@pytest.mark.lab
def test_an_unreachable_host_is_refused_with_sshs_reason(lab: tuple[Sandbox, Lab]) -> None:
    _, hosts = lab
    gone = replace(hosts.dut, address="198.19.253.99")
    with pytest.raises(PerfkitError) as err:
        AgentSession(gone)
    assert str(err.value).startswith("host dut1 (198.19.253.99:22) is unreachable: ssh: connect to host 198.19.253.99 port 22: ")


@pytest.mark.lab
@pytest.mark.parametrize("how", ["controller killed", "session cut", "agent killed, then perfkit clean"])
def test_whatever_ends_the_session_leaves_no_xdp_program_on_the_dut(lab: tuple[Sandbox, Lab], how: str) -> None:
    sb, hosts = lab
    session = AgentSession(hosts.dut)
    session.call("load", dataplane="l4lb", frame_size=128, flows=4, interfaces=["a1", "b1"], cores=[1])
    assert _xdp_left(sb, "dut1") == 2
    agent_pid = session.hello["pid"]
    if how == "controller killed":
        session.kill()     # the ssh client dies with its controller: the session ends
    elif how == "session cut":
        # the SSH server's process of this session (the agent's parent) dies: the connection is cut
        os.kill(int(Path(f"/proc/{agent_pid}/stat").read_text().rsplit(")", 1)[1].split()[1]), signal.SIGKILL)
    else:
        os.kill(agent_pid, signal.SIGKILL)
        time.sleep(0.5)
        assert _xdp_left(sb, "dut1") == 2    # a killed agent cleans nothing: perfkit clean on the host does
        # perfkit clean elsewhere (the controller's namespace) leaves the DUT host's record alone
        assert agent_mod.clean() == [] and (owners.STATE_DIR / "agents" / f"{agent_pid}.json").exists()
        out = subprocess.run(["ip", "netns", "exec", sb.ns("dut1"), f"{hosts.dut.root}/venv/bin/python", "-m",
                              "perfkit.lab.agent", "--clean"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert sum("XDP program" in r for r in json.loads(out.stdout)) == 2
    assert _gone_within(sb, 10) < 10
    session.kill()
    assert not list((owners.STATE_DIR / "agents").glob(f"{agent_pid}.json"))


def _gro(sb: Sandbox, dev: str) -> str:
    out = subprocess.run(["ip", "netns", "exec", sb.ns("dut1"), "ethtool", "-k", dev], capture_output=True, text=True).stdout
    return next(line.split(": ")[1].split()[0] for line in out.splitlines() if line.startswith("generic-receive-offload"))


@pytest.mark.lab
def test_a_knob_is_set_on_the_dut_hosts_interfaces_and_a_killed_agents_is_restored_by_clean(
        lab: tuple[Sandbox, Lab]) -> None:
    sb, hosts = lab
    before = _gro(sb, "a1")
    other = "off" if before == "on" else "on"
    session = AgentSession(hosts.dut)
    with pytest.raises(PerfkitError, match="knob steering"):   # the DUT host is set up as provisioned
        session.call("load", dataplane="l4lb", frame_size=128, flows=4, interfaces=["a1", "b1"], cores=[1],
                     knobs={"steering": "5tuple"})
    session.call("load", dataplane="l4lb", frame_size=128, flows=4, interfaces=["a1", "b1"], cores=[1],
                 knobs={"gro": other})
    assert _gro(sb, "a1") == _gro(sb, "b1") == other
    agent_pid = session.hello["pid"]
    os.kill(agent_pid, signal.SIGKILL)
    time.sleep(0.5)
    assert _gro(sb, "a1") == other                      # a killed agent restores nothing: clean on the host does
    assert agent_mod.clean() == []                      # not from another namespace: the record stays
    out = subprocess.run(["ip", "netns", "exec", sb.ns("dut1"), f"{hosts.dut.root}/venv/bin/python", "-m",
                          "perfkit.lab.agent", "--clean"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"knob gro on a1 generic-receive-offload: {before}" in json.loads(out.stdout)
    assert _gro(sb, "a1") == _gro(sb, "b1") == before
    session.kill()


# -- trials in the lab: LabGenerator ---------------------------------------------------------------
@pytest.mark.lab
@pytest.mark.parametrize("dataplane, testers", [("pgwu", ["tester1"]), ("l4lb", ["tester1", "tester2"])])
def test_a_trial_over_ssh_counts_exactly_and_measures_the_dut_on_its_host(lab: tuple[Sandbox, Lab], dataplane: str,
                                                                            testers: list[str]) -> None:
    from perfkit.generators import create
    sb, _ = lab
    with create("lab", Scenario(dataplane=dataplane, frame_size=128, flows=16), inventory=str(sb.inventory),
                testers=testers) as gen:
        r = gen.measure(20_000, 0.5)
        assert _xdp_left(sb, "dut1") == 2 * len(testers)
    assert r.generator == "lab" and r.tx_packets == r.intended_packets == 10_000
    assert r.rx_packets == 10_000 and r.mismatched_packets == 0 and r.dut_drops == {} and r.tester_drops == {}
    assert not any("unaccounted" in n for n in r.notes)
    assert r.objects and all(k.startswith("dut1:") and len(v) == 64 for k, v in r.objects.items()), r.objects
    # the DUT's cost, from its own host: the program's run time and its packet threads' CPU time
    assert r.bpf_ns_per_packet and 0 < r.bpf_ns_per_packet < r.dut_ns_per_packet
    assert 0 < r.dut_busy < 1 and r.dut_busy_per_core and r.dut_wakeups > 0
    assert r.latency_ns["min"] > 0 and r.latency_ns["p50"] >= r.latency_ns["min"]
    # the stall probe ran on the DUT host's DUT core, as on the local testbed
    assert list(r.stalls) == ["1"] and r.dut_stall_us is not None and r.dut_speed_ns_per_step > 0
    # perf stat counted the DUT host's DUT core: software events always, PMU ones or "not available"
    assert list(r.dut_perf_counts) == ["1"] and r.dut_perf_counts["1"]["context-switches"] >= 0
    assert (r.dut_cycles_per_packet is None) == (r.dut_perf_counts["1"]["cycles"] == "not available")
    # who ran on the DUT core, from the DUT host: the packet threads, and not the agent (kept off it)
    assert list(r.dut_core_time) == ["1"] and r.dut_core_time["1"]["packet"] > 0
    assert r.dut_perfkit_share is not None and r.dut_perfkit_share < 0.05 and r.dut_others_share is not None
    assert [n for n in r.notes if n.startswith(tuple(f"{t}: offered" for t in testers))] == \
        [f"{t}: offered {10_000 // len(testers)}, received {10_000 // len(testers)}" for t in testers]
    assert _gone_within(sb, 10) < 1


def _exporters(sb: Sandbox) -> list[int]:
    """Pids of ``perfkit exporter`` processes on the DUT host."""
    pids = subprocess.run(["ip", "netns", "pids", sb.ns("dut1")], capture_output=True, text=True).stdout.split()
    return [int(p) for p in pids if b"perfkit.cli.exporter" in _cmdline(int(p))]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.lab
def test_the_labs_prometheus_has_the_lbs_per_vip_counter_from_the_dut_host_and_it_matches_the_sinks(
        lab: tuple[Sandbox, Lab]) -> None:
    """Issue 27 item 3 on the lab: the DUT host's agent serves the loaded LB's counters where the
    lab's Prometheus scrapes them; their increase over a trial is what the testers received."""
    from perfkit.generators import create
    from perfkit.metrics.dpcounters import counter_increase
    sb, _ = lab
    ep = Endpoints(prometheus_url=f"http://{sb.address('metrics1')}:9090", username="perfkit",
                   password=sb.metrics_password)
    vip_packets, sel = "perfkit_l4lb_vip_packets_total", 'job="dataplane",host="dut1"'
    # two flows, two VIPs, two testers: tester1 sends flow 0 (the first VIP), tester2 flow 1 (the second)
    scenario = Scenario(dataplane="l4lb", frame_size=128, flows=2, params={"vips": 2, "reals": 2})
    with create("lab", scenario, inventory=str(sb.inventory), testers=["tester1", "tester2"]) as gen:
        assert gen.loaded["exporter"] == f"http://{sb.address('dut1')}:9435/metrics"
        # the lab has a metrics password: the exporter asks for it, as the host's node-exporter does
        assert requests.get(gen.loaded["exporter"], timeout=5).status_code == 401
        pids = _exporters(sb)
        assert len(pids) == 1 and not set(os.sched_getaffinity(pids[0])) & {1}   # off the DUT core
        deadline = time.monotonic() + 30
        while len(_query(ep, f"{vip_packets}{{{sel}}}")) < 4 and time.monotonic() < deadline:   # 2 instances x 2 VIPs
            time.sleep(0.2)
        time.sleep(1.5 * ep.scrape_interval)   # a scrape before the trial: its starting value
        r = gen.measure(20_000, 2.0)
        inc = counter_increase(ep, vip_packets, r.start_time, r.end_time, selector=sel)
    received = {n.split(":")[0]: int(n.rsplit(" ", 1)[1]) for n in r.notes if ": offered " in n}
    assert r.rx_packets == r.tx_packets > 30_000 and sum(received.values()) == r.rx_packets, r.notes
    by_vip = inc.groupby("vip")["increase"].sum().to_dict()
    assert by_vip == {"198.19.0.1:443/udp": received["tester1"], "198.19.0.2:443/udp": received["tester2"]}, inc
    # each tester's cables are an instance of the LB of their own (label testbed)
    assert set(inc["testbed"]) == {"dut1-a0", "dut1-a1"}
    # unloaded: the exporter is gone, and with it its descriptions
    assert not [p for p in _exporters(sb) if p in pids]
    assert not list((owners.STATE_DIR / "dataplanes").glob("dut1-*.json"))


def _query(ep: Endpoints, promql: str) -> list[dict]:
    r = requests.get(ep.prometheus_url + "/api/v1/query", params={"query": promql}, auth=(ep.username, ep.password),
                     timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


@pytest.mark.lab
def test_a_lab_trial_runs_under_a_knob_that_reads_back_on_the_dut_host_and_is_restored(lab: tuple[Sandbox, Lab]) -> None:
    from perfkit.generators import create
    from perfkit.generators.lab import cabling
    sb, hosts = lab
    _, (a, b) = cabling(hosts, next(h for h in hosts.role("tester") if h.name == "tester1"))
    before = _gro(sb, a)
    other = "off" if before == "on" else "on"
    with create("lab", Scenario(dataplane="pgwu", frame_size=128, flows=16, knobs={"gro": other}),
                inventory=str(sb.inventory), testers=["tester1"]) as gen:
        assert _gro(sb, a) == _gro(sb, b) == other
        r = gen.measure(20_000, 0.5)
    assert r.knobs == {"gro": other} and r.rx_packets == r.tx_packets == 10_000
    assert _gro(sb, a) == _gro(sb, b) == before


@pytest.mark.lab
def test_two_testers_send_at_once_with_exact_merged_counts(lab: tuple[Sandbox, Lab], tmp_path: Path) -> None:
    """Multi-node generation: tester2 on the other CPU (here the DUT's: the VM has two), each tester
    sending its slice of the flows as fast as it can, both in the same second; every frame offered is
    received or counted as dropped, the two hosts' counts merged.

    Not compared with one tester's rate: here tester2 shares the DUT's CPU, and tester1's own rate
    depends on how much the DUT sends back to it (alone, 1.9 M frames received and 2.4 Mpps offered;
    beside tester2, 32 k received and 5.2 Mpps), so such a ratio measures the scheduler of this VM."""
    import yaml
    from perfkit.generators import create
    sb, _ = lab
    inv = yaml.safe_load(sb.inventory.read_text())
    inv["all"]["children"]["tester"]["hosts"]["tester2"]["tester_cores"] = [1]
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(inv))
    scenario = Scenario(dataplane="pgwu", frame_size=128, flows=16)
    trials = {}
    for testers in (["tester1"], ["tester1", "tester2"]):
        with create("lab", scenario, inventory=str(inventory), testers=testers) as gen:
            trials[len(testers)] = r = gen.measure(None, 1.0)
        assert r.tx_packets == r.rx_packets + sum(r.dut_drops.values()) + sum(r.tester_drops.values()), r.notes
        assert not any("unaccounted" in n for n in r.notes) and r.mismatched_packets == 0
        assert r.reordered == 0 and r.duplicates == 0
        offered = [int(n.split("offered ")[1].split(",")[0]) for n in r.notes if ": offered " in n]
        assert len(offered) == len(testers) and sum(offered) == r.tx_packets
        assert min(offered) > 10_000, r.notes                 # every tester sent its slice
        # at once: one after the other, the trial would span twice its duration
        assert r.end_time - r.start_time < 1.5 * r.duration, (r.start_time, r.end_time)
    one, two = trials[1], trials[2]
    assert one.ceiling_hosts == two.ceiling_hosts == []   # as fast as possible: no share to fall short of
    # asked for three times one tester's ceiling, tester2 (on the DUT's CPU) cannot offer its half:
    # the trial names it as the host whose ceiling limited generation
    with create("lab", scenario, inventory=str(inventory), testers=["tester1", "tester2"]) as gen:
        r = gen.measure(3 * one.tx_pps, 0.5)
    assert "tester2" in r.ceiling_hosts
    assert any(n.startswith("generation limited the trial: ") and "tester2 (" in n for n in r.notes), r.notes
    assert r.tx_packets == r.rx_packets + sum(r.dut_drops.values()) + sum(r.tester_drops.values()), r.notes
    assert _gone_within(sb, 10) < 1

# -- the same campaign, in the lab -----------------------------------------------------------------
LAB_CAMPAIGN = """\
name: lab-smoke
dataplane: {dataplane}
frame_sizes: [128]
flows: [16]
generator: {{backend: xdp, options: {{testers: [tester1]}}}}
methods:
  - method: maxrate
    params: {{duration: 0.5}}
  - method: sweep
    params: {{nominal_rate: 10000, start: 1.0, stop: 1.0, step: 1.0, duration: 0.5}}
  - method: ndrpdr
    params: {{goals: [0.0], initial_duration: 0.25, final_duration: 0.5, relative_width: 0.1, max_trials: 6}}
metrics: {{enabled: {metrics}}}
"""


@pytest.mark.lab
@pytest.mark.parametrize("dataplane, metrics", [("pgwu", True), ("l4lb", False)])
def test_a_campaign_runs_in_the_lab_with_the_dut_measured_on_its_host(lab: tuple[Sandbox, Lab], dataplane: str,
                                                                     metrics: bool, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd
    from perfkit.cli import main
    from perfkit.store import RunStore
    sb, _ = lab
    campaign = tmp_path / "lab-smoke.yaml"
    text = LAB_CAMPAIGN.format(dataplane=dataplane, metrics=str(metrics).lower())
    # with metrics, a maxrate trial long enough for Prometheus' CPU figures (3 scrape intervals),
    # perf recorded on the DUT host during it
    campaign.write_text(text.replace("{duration: 0.5}", "{duration: 3.5}") + "perf: [maxrate]\n" if metrics else text)
    assert main(["run", str(campaign), "--lab", str(sb.inventory), "--root", str(tmp_path / "runs"), "--no-progress",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "complete"
    store = RunStore.open(out["run_id"], tmp_path / "runs")
    trials = store.trials()
    assert isinstance(trials, pd.DataFrame) and len(trials) >= 3
    assert set(trials["generator"]) == {"lab"} and (trials["mismatched_packets"] == 0).all()
    assert trials["dut_ns_per_packet"].notna().all() and trials["bpf_ns_per_packet"].notna().all()
    maxrate = trials.loc[trials["method"].str.startswith("maxrate"), "trial_id"]
    assert len(maxrate) >= 1   # more when a host stall made one stalled (searches repeat those)
    # at 10 kpps (a 256-frame ring lasts 25.6 ms: longer than the host's stalls) every frame comes back
    low = trials[trials["method"].str.startswith("sweep")]
    assert len(low) >= 1 and (low["tx_packets"] == 5000).all() and (low["rx_packets"] == 5000).all()
    meta = store.metadata()
    assert meta["generator"] == "lab" and "lab: " in meta["campaign"]["text"]
    assert [h["name"] for h in meta["lab"]["hosts"]] == ["dut1", "tester1", "tester2", "metrics1"]
    assert meta["lab"]["facts"]["dut1"]["interfaces"]["a0"]["driver"] == "veth"
    assert not any("ssh_options" in h or "ansible_ssh_private_key_file" in json.dumps(h) for h in meta["lab"]["hosts"])
    assert all(any(n.startswith("lab ") and "DUT dut1" in n for n in json.loads(notes)) for notes in trials["notes"])
    # the report says which hosts measured each figure, and the lab's hosts
    from perfkit import analysis
    assert all(json.loads(h) == {"dut": ["dut1"], "tester": ["tester1"]} for h in trials["hosts"])
    run = analysis.load_run(out["run_id"], tmp_path / "runs")
    assert set(analysis.throughput_table(run)["hosts"]) == {"DUT dut1, tester tester1"}
    lab_row = analysis.run_summary(run).set_index("fact").loc["lab", "value"]
    assert lab_row.startswith(f"dut1 (dut, {sb.address('dut1')}, kernel ") and "metrics1 (metrics" in lab_row
    if metrics:   # the DUT host's CPU, from the lab's metrics host: its Prometheus scraped dut1's node-exporter
        assert out["metrics"]["note"].startswith(f"metrics: pushing to http://{sb.address('metrics1')}:9091")
        cpu = store.prometheus_cpu()
        assert cpu is not None and set(cpu["instance"]) == {f"{sb.address('dut1')}:9100"}
        assert set(maxrate) <= set(cpu["trial_id"])
        from perfkit.perf.store import read_folded
        folded = read_folded(store.path, maxrate.iloc[0])
        assert "bpf_prog_" in folded and "_xdp_pgwu" in folded and "napi/a0" in folded   # the DUT host's stacks
        # pushed and queried with the lab's basic-auth password, which no file of the run holds
        secret = sb.metrics_password.encode()
        assert not [p for p in store.path.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert _gone_within(sb, 10) < 1




def _ring_lost(trial: Any) -> int:
    """A stored trial's frames lost to a full veth ring (tests/counting.py: the host's, not the NF's)."""
    from tests.counting import RING
    drops = [json.loads(trial[k]) if isinstance(trial[k], str) else trial[k] for k in ("dut_drops", "tester_drops")]
    return sum(d.get(RING, 0) for d in drops)


def _described_campaign(dataplane: str) -> str:
    """LAB_CAMPAIGN's maxrate and sweep at one flow, no metrics, perf recorded during maxrate."""
    text = LAB_CAMPAIGN.format(dataplane=dataplane, metrics="false").replace("flows: [16]\n", "")
    head, _, tail = text.partition("  - method: ndrpdr\n")
    return head + tail.split("\n", 1)[1] + "perf: [maxrate]\n"


@pytest.mark.lab
@pytest.mark.parametrize("nf", ["mynf", "xdp-filter"])
def test_a_description_files_dataplane_runs_a_campaign_in_the_lab_measured_on_the_dut_host(
        lab: tuple[Sandbox, Lab], nf: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A description (tests/describe's NF, which perfkit builds on the DUT host and attaches; xdp-filter,
    attached by its own CLI there) runs a campaign with its counters, the DUT's cost per packet and
    a flame graph from the DUT host. The hosts get it through the agents' protocol, not the shared
    file system: the campaign's directory is gone once the generator sent it."""
    import shutil
    from perfkit.cli import main
    from perfkit.perf.store import read_folded
    from perfkit.store import RunStore
    sb, hosts = lab
    src = tmp_path / "nf"
    src.mkdir()
    if nf == "mynf":
        _description(src)
        description, program = "mynf.dataplane.yaml", "xdp_mynf"
    else:
        root = Path(__file__).resolve().parents[1] / "examples"
        for f in ("xdp-filter.dataplane.yaml", "udp.py"):
            shutil.copy(root / f, src / f)
        description, program = "xdp-filter.dataplane.yaml", "xdpfilt_alw_all"
    (src / "c.yaml").write_text(_described_campaign(f"./{description}"))
    assert main(["run", str(src / "c.yaml"), "--lab", str(sb.inventory), "--root", str(tmp_path / "runs"),
                 "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "complete"
    store = RunStore.open(out["run_id"], tmp_path / "runs")
    trials = store.trials()
    assert set(trials["generator"]) == {"lab"} and (trials["mismatched_packets"] == 0).all()
    # the DUT's cost per packet, from its host's kernel BPF statistics and its packet threads
    assert trials["dut_ns_per_packet"].notna().all() and trials["bpf_ns_per_packet"].notna().all()
    low = trials[trials["method"].str.startswith("sweep")].iloc[0]
    verdicts = json.loads(low["verdicts"]) if isinstance(low["verdicts"], str) else low["verdicts"]
    if nf == "mynf":   # built on the DUT host, into its perfkit_root's cache; forwarded, counted by the NF
        objects = json.loads(low["objects"]) if isinstance(low["objects"], str) else low["objects"]
        [(where, sha)] = objects.items()
        assert where.startswith(f"dut1:{hosts.dut.root}/cache/objects/") and len(sha) == 64
        assert low["tx_packets"] == low["rx_packets"] + _ring_lost(low) == 5000, low["notes"]
        assert verdicts == {"XDP_REDIRECT": low["rx_packets"]}
    else:              # every frame denied: counted as dropped by xdp-filter's own statistics
        assert low["rx_packets"] == verdicts["XDP_DROP"] == low["tx_packets"] > 0, (low["notes"], verdicts)
    maxrate = trials.loc[trials["method"].str.startswith("maxrate"), "trial_id"]
    folded = read_folded(store.path, maxrate.iloc[0])
    assert f"_{program}" in folded and "napi/a0" in folded, folded[:300]   # the DUT host's stacks
    assert _gone_within(sb, 10) < 1


PLUGIN = Path(__file__).resolve().parent / "data" / "plugins" / "perfkit-demo-plugin"


def _pip(python: str | Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True,
                   capture_output=True)


@pytest.mark.lab
def test_a_plugin_dataplane_runs_a_campaign_in_the_lab_from_the_hosts_environments(
        lab: tuple[Sandbox, Lab], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tests/test_plugins.py's plugin, installed from its wheel into the controller's environment and
    each host's own virtualenv (``<perfkit_root>/venv``): refused on a host that lacks it, then a
    campaign whose DUT runs it from dut1's environment (its object compiled there, on first use)."""
    import sys
    from perfkit import dataplanes
    from perfkit.cli import main
    from perfkit.errors import ConfigError
    from perfkit.generators import create
    from perfkit.perf.store import read_folded
    from perfkit.store import RunStore
    sb, hosts = lab
    import shutil
    shutil.copytree(PLUGIN, tmp_path / "plugin")   # its build leaves build/ and egg-info beside it
    _pip(sys.executable, "wheel", "--no-deps", "-w", str(tmp_path / "wheels"), str(tmp_path / "plugin"))
    [wheel] = (tmp_path / "wheels").glob("perfkit_demo_plugin-*.whl")
    venvs = [Path(h.root) / "venv" / "bin" / "python" for h in hosts.hosts if h.name in ("dut1", "tester1")]
    _pip(sys.executable, "install", "--no-deps", str(wheel))
    dataplanes.refresh()
    try:
        with pytest.raises(ConfigError, match=r"^dataplane demo on host dut1: 'none' is not allowed; allowed: "
                                              r"perfkit-demo-plugin 0\.3\.0, as on the controller: pip install it"):
            create("lab", Scenario(dataplane="demo", frame_size=128), inventory=str(sb.inventory), testers=["tester1"])
        for venv in venvs:
            _pip(venv, "install", "--no-index", "--no-deps", str(wheel))
        campaign = tmp_path / "demo.yaml"
        campaign.write_text(_described_campaign("demo"))
        assert main(["run", str(campaign), "--lab", str(sb.inventory), "--root", str(tmp_path / "runs"),
                     "--no-progress", "--json"]) == 0
    finally:
        for venv in venvs:
            subprocess.run([str(venv), "-m", "pip", "-q", "uninstall", "-y", "perfkit-demo-plugin"], capture_output=True)
        _pip(sys.executable, "uninstall", "-y", "perfkit-demo-plugin")
        dataplanes.refresh()
    out = json.loads(capsys.readouterr().out)
    store = RunStore.open(out["run_id"], tmp_path / "runs")
    trials = store.trials()
    assert out["status"] == "complete" and set(trials["dataplane"]) == {"demo"}
    assert trials["dut_ns_per_packet"].notna().all() and trials["bpf_ns_per_packet"].notna().all()
    low = trials[trials["method"].str.startswith("sweep")].iloc[0]
    assert low["tx_packets"] == 5000 and low["rx_packets"] + _ring_lost(low) == 5000, low["notes"]
    maxrate = trials.loc[trials["method"].str.startswith("maxrate"), "trial_id"]
    assert "_xdp_demo_fwd" in read_folded(store.path, maxrate.iloc[0])
    assert _gone_within(sb, 10) < 1


@pytest.mark.lab
def test_a_lab_run_killed_mid_trial_leaves_the_dut_clean_and_resumes(lab: tuple[Sandbox, Lab], tmp_path: Path) -> None:
    sb, _ = lab
    perfkit = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "perfkit")
    campaign = tmp_path / "lab-kill.yaml"
    campaign.write_text(LAB_CAMPAIGN.format(dataplane="pgwu", metrics="false").replace("{duration: 0.5}", "{duration: 3}"))
    root = tmp_path / "runs"
    proc = subprocess.Popen([perfkit, "run", str(campaign), "--lab", str(sb.inventory), "--root", str(root),
                             "--no-progress", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _xdp_left(sb, "dut1") < 2:      # the DUT is loaded: the first trial (3 s) is about to run
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        time.sleep(1.5)                        # mid-trial
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone_within(sb, 10) < 10
    runs = [d.name for d in root.iterdir() if d.is_dir()]
    assert len(runs) == 1
    done = subprocess.run([perfkit, "run", "--resume", runs[0], "--root", str(root), "--no-progress", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "complete"
    assert _gone_within(sb, 10) < 1


@pytest.mark.lab
def test_several_dut_cores_each_serve_their_queues(lab: tuple[Sandbox, Lab], tmp_path: Path) -> None:
    """Two DUT cores in a lab, as with a NIC's RSS: provisioning gives the DUT's and tester1's cables
    two queues; tester1 sends from both CPUs (a veth queues a frame by the sender's CPU), and the
    DUT's NAPI thread of each queue runs on its own DUT core. (Last in this module: the sandbox's
    cables keep their two queues.)"""
    import yaml
    from perfkit.generators import create
    sb, _ = lab
    inv = yaml.safe_load(sb.inventory.read_text())
    inv["all"]["children"]["dut"]["hosts"]["dut1"]["dut_cores"] = [0, 1]
    inv["all"]["children"]["tester"]["hosts"]["tester1"]["tester_cores"] = [0, 1]
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(inv))
    result = provision.provision(inventory)
    assert result.returncode == 0, result.recap
    with create("lab", Scenario(dataplane="pgwu", frame_size=128, flows=16, dut_cores=2), inventory=str(inventory),
                testers=["tester1"]) as gen:
        r = gen.measure(20_000, 0.5)
    assert r.tx_packets == r.rx_packets == 10_000 and r.mismatched_packets == 0 and r.dut_cores == 2
    assert sorted(r.dut_busy_per_core) == ["0", "1"] and all(v > 0 for v in r.dut_busy_per_core.values())
    assert sorted(r.dut_core_time) == ["0", "1"] and sorted(r.stalls) == ["0", "1"]
    assert _gone_within(sb, 10) < 1
