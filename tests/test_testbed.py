"""Namespaces and links come up as described and always go away: on exit, on exceptions, on SIGINT
and SIGTERM; `clean` removes leftovers, and only those whose owner process is gone (a test suite
beside a running campaign leaves the campaign's testbed alone)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.testbed import netns
from perfkit import errors
from perfkit.errors import ConfigError
from perfkit.testbed.topology import Testbed, clean, owner_record, running
from tests.conftest import ROOT


def links(ns: str) -> dict[str, str]:
    out = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(": ")[1].split("@")[0]: line for line in out.splitlines()}


def test_topology_and_teardown():
    with Testbed(mtu=3100) as tb:
        assert tb.rid in running()
        tester, dut = links(tb.tester_ns), links(tb.dut_ns)
        assert {tb.p0.dev, tb.p1.dev} <= set(tester) and {tb.a.dev, tb.b.dev} <= set(dut)
        assert f"link-netns {tb.dut_ns}" in tester[tb.p0.dev] and "mtu 3100" in tester[tb.p0.dev]
        assert tb.a.mac in dut[tb.a.dev]
        addrs = subprocess.run(["ip", "-n", tb.dut_ns, "-o", "-4", "addr"], capture_output=True, text=True).stdout
        assert "198.19.255.1/30" in addrs and "198.19.255.5/30" in addrs
        # the tester can reach the DUT's address through the veth (kernel path, no XDP yet)
        ping = subprocess.run(["ip", "netns", "exec", tb.tester_ns, "ping", "-c1", "-W2", "198.19.255.1"],
                              capture_output=True)
        assert ping.returncode == 0
    assert tb.rid not in running()
    assert not netns.exists(tb.tester_ns) and not netns.exists(tb.dut_ns)


def _ethtool_s(ns: str, dev: str) -> dict[str, int]:
    """``ethtool -S`` as the command prints it, parsed."""
    out = netns.run(ns, "ethtool", "-S", dev, check=False)
    return {k.strip(): int(v) for k, _, v in (ln.partition(":") for ln in out.splitlines()[1:]) if v.strip().isdigit()}


def test_what_the_testbed_sets_from_this_process_is_what_the_commands_show():
    """Set and read without a command (``perfkit.testbed.netns``): IPv6 off in both namespaces, GRO on
    at the DUT's ports, and ``link_stats`` is ``ethtool -S`` (no such device or namespace: {})."""
    with Testbed() as tb:
        for ns in (tb.tester_ns, tb.dut_ns):
            assert netns.run(ns, "sysctl", "-n", "net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"
                             ).split() == ["1", "1"]
        for port, gro in ((tb.a, "on"), (tb.b, "on"), (tb.p0, "off")):
            assert f"generic-receive-offload: {gro}" in netns.run(port.ns, "ethtool", "-k", port.dev)
        for port in (tb.p0, tb.p1, tb.a, tb.b, tb.anchor):
            stats = netns.link_stats(port.ns, port.dev)
            assert "rx_queue_0_xdp_packets" in stats and stats == _ethtool_s(port.ns, port.dev)
        assert netns.link_stats(tb.dut_ns, "nosuch0") == {} and netns.link_stats("pk-nosuch", tb.a.dev) == {}
        with pytest.raises(errors.TestbedError, match="nosuch0"):
            netns.batch(tb.dut_ns, [["link", "set", tb.a.dev, "up"], ["link", "set", "nosuch0", "up"]])


def test_exception_inside_cleans_up():
    with pytest.raises(RuntimeError):
        with Testbed() as tb:
            rid = tb.rid
            raise RuntimeError("trial failed")
    assert rid not in running()


def test_bad_mtu_and_testbed_id_are_refused():
    with pytest.raises(ConfigError, match="mtu: 9001"):
        Testbed(mtu=9001)
    with pytest.raises(ConfigError, match="testbed_id"):
        Testbed(testbed_id="nothex")


#: The child's signals as a shell would start it, whatever the test process (a long suite) did to
#: its own, which a child inherits: Python's Ctrl-C handler, SIGTERM's default action, none blocked.
AS_FROM_A_SHELL = ("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                   "signal.signal(signal.SIGTERM, signal.SIG_DFL)\nsignal.pthread_sigmask(signal.SIG_SETMASK, [])\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_clean_up(sig):
    code = (AS_FROM_A_SHELL + "import time\nfrom perfkit.testbed.topology import Testbed\n"
            "with Testbed(testbed_id='abc123'):\n    print('up', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        assert "abc123" in running()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            pytest.fail(f"{sig.name} did not end the process in 20 s: "
                        + ", ".join(ln for ln in status.splitlines() if ln.startswith(("State", "SigBlk", "SigIgn", "SigCgt"))))
    finally:
        proc.kill()
        proc.wait()  # reaped: a zombie would still own the testbed for the next case
    assert "abc123" not in running()


def leave_testbed_behind(testbed_id: str) -> None:
    """A process sets up a testbed and dies without any clean-up (as by SIGKILL)."""
    code = ("from perfkit.testbed.topology import Testbed\nimport os\n"
            f"Testbed(testbed_id={testbed_id!r}).up()\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    assert testbed_id in running()  # os._exit skipped every cleanup


def test_clean_removes_leftovers_of_a_killed_run():
    leave_testbed_behind("dead01")
    removed = clean()
    assert any("dead01" in r for r in removed)
    assert "dead01" not in running()
    assert owner_record("dead01") is None


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    return proc


def test_cli_clean_and_status(perfkit_module):
    """``python -m perfkit testbed ...`` (processes forked from the session's server:
    ``tests/script_forks.py``)."""
    leave_testbed_behind("dead02")
    status = perfkit_module.run(["testbed", "status", "--json"], cwd=ROOT)
    assert '"dead02"' in status.stdout
    _ok(perfkit_module.run(["testbed", "clean"], cwd=ROOT))
    assert "dead02" not in running()


def test_clean_leaves_the_testbed_of_a_live_process_alone(perfkit_module):
    """`perfkit clean` (e.g. from a test suite) beside a running campaign: the live process keeps its
    testbed, the dead one's is removed; `--run` removes a given run's testbed."""
    leave_testbed_behind("dead04")
    code = ("import time\nfrom perfkit import owners\nfrom perfkit.testbed.topology import Testbed\n"
            "owners.set_run('run-live')\n"
            "with Testbed(testbed_id='a1fe01'):\n    print('up', flush=True)\n    time.sleep(120)\n")
    live = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "up"
        out = _ok(perfkit_module.run(["clean", "--json"], cwd=ROOT))
        removed = json.loads(out.stdout)
        assert any("dead04" in r for r in removed)
        assert not any("a1fe01" in r for r in removed)
        assert "a1fe01" in running() and "dead04" not in running()
        assert f"kept testbed a1fe01: owned by pid {live.pid}" in out.stderr and "run run-live" in out.stderr
        assert links("pka1fe01-tester")                          # its links are intact
        assert live.poll() is None
        # a run's own leftovers can be removed by name, even while its process lives
        out = _ok(perfkit_module.run(["clean", "--run", "run-live", "--json"], cwd=ROOT))
        assert any("a1fe01" in r for r in json.loads(out.stdout))
        assert "a1fe01" not in running()
    finally:
        live.kill()
        live.wait()
    clean(run_id="run-live")


@pytest.mark.slow   # make test keeps clean leaving a live process's testbed alone
def test_one_command_removes_testbeds_and_metrics_servers(tmp_path, perfkit_module):
    stack_dir = tmp_path / "stack"
    _ok(perfkit_module.run(["stack", "up", "--stack-dir", str(stack_dir), "--prometheus-port", "0",
                            "--pushgateway-port", "0", "--node-exporter-port", "0"], cwd=ROOT))
    state = json.loads((stack_dir / "state.json").read_text())
    pids = [c["pid"] for c in state["components"].values()]
    assert all(os.path.exists(f"/proc/{p}") for p in pids)
    Testbed(testbed_id="dead03").up(keep=True)
    out = _ok(perfkit_module.run(["clean", "--stack-dir", str(stack_dir), "--json"], cwd=ROOT)).stdout
    removed = json.loads(out)
    assert any("dead03" in r for r in removed) and sum("metrics server" in r for r in removed) == 3
    assert "dead03" not in running()
    for p in pids:  # gone, or a zombie waiting for init to reap it
        stat = Path(f"/proc/{p}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z"
