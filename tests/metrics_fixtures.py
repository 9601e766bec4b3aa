"""Fixtures and helpers of the metrics tests: real servers on free 127.0.0.1 ports, always stopped.

Import the fixtures into a test module (``from tests.metrics_fixtures import metrics_stack``); every
server started here is stopped in a ``finally`` (test failure, error or Ctrl-C alike).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from perfkit.metrics import servers, stack
from perfkit.trial import TrialResult

BURNER_NAME = "perfkit-burn"
#: A busy loop that names itself (comm) so it can be found in /proc.
_BURNER = ("import ctypes; ctypes.CDLL(None).prctl(15, b'%s', 0, 0, 0)\nwhile True: pass\n" % BURNER_NAME)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    ports: list[int] = []
    while len(ports) < n:
        p = servers.free_port("127.0.0.1")
        if p not in ports:
            ports.append(p)
    return ports


def start_stack(d: Path, **kw) -> stack.StackStatus:
    """``stack.up`` in ``d`` on three free ports (never the standard ones another stack may use)."""
    prom, pgw, node = free_ports(3)
    return stack.up(d, prometheus_port=prom, pushgateway_port=pgw, node_exporter_port=node, **kw)


def wait_for_targets(st: stack.StackStatus, auth: tuple[str, str] | None = None, timeout: float = 60.0) -> None:
    """Wait (generously) until Prometheus scrapes both targets successfully."""
    url = st.component("prometheus").url + "/api/v1/targets"
    deadline = time.monotonic() + timeout
    health: dict[str, str] = {}
    while time.monotonic() < deadline:
        targets = requests.get(url, auth=auth, timeout=5).json()["data"]["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in targets}
        if health.get("node") == "up" and health.get("pushgateway") == "up":
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus targets not up after {timeout} s: {health}")


@contextlib.contextmanager
def running_stack(d: Path, auth: tuple[str, str] | None = None) -> Iterator[stack.StackStatus]:
    try:
        st = start_stack(d, basic_auth=auth)
        wait_for_targets(st, auth)
        yield st
    finally:
        stack.down(d)


@pytest.fixture(scope="module")
def metrics_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackStatus]:
    """A running stack (no auth) shared by a module's tests; a test that stops a part restarts it."""
    with running_stack(tmp_path_factory.mktemp("stack")) as st:
        yield st


AUTH = ("perfkit", "correct horse battery")


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackStatus]:
    """A running stack whose three servers require basic auth ``AUTH``."""
    pytest.importorskip("bcrypt", reason="basic auth for the local stack needs bcrypt (pip install -e .[dev])")
    with running_stack(tmp_path_factory.mktemp("authstack"), AUTH) as st:
        yield st


@contextlib.contextmanager
def burner(cpu: int) -> Iterator[subprocess.Popen]:
    """A busy-loop process pinned to ``cpu``, yielded once it has named itself (Python has started and
    the loop is next); killed on exit."""
    proc = subprocess.Popen([sys.executable, "-c", _BURNER])
    try:
        os.sched_setaffinity(proc.pid, {cpu})
        comm, deadline = Path(f"/proc/{proc.pid}/comm"), time.monotonic() + 30
        while comm.read_text().strip() != BURNER_NAME and time.monotonic() < deadline:
            time.sleep(0.01)
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def server(argv: list[str], url: str, log: Path, verify: bool | str = True,
           timeout: float = 30.0) -> Iterator[subprocess.Popen]:
    """Run one server process until ``url`` answers; always terminated afterwards."""
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{argv[0]} exited: {log.read_text()[-2000:]}")
            try:
                requests.get(url, verify=verify, timeout=2)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def make_result(run_id: str = "", **kw) -> TrialResult:
    """A trial result with distinctive, exactly representable and awkward values."""
    now = time.time()
    fields = dict(
        dataplane="pgwu", params={"direction": "dl", "sessions": 4096}, frame_size=128, wire_frame_size=168, flows=16, dut_cores=2,
        generator="sim", duration=4.0, intended_pps=1488095.2380952381, intended_packets=5952380,
        tx_packets=5952001, rx_packets=5950017, tx_bytes=5952001 * 168, rx_bytes=5950017 * 128,
        elapsed=4.000731, start_time=now - 5.0, end_time=now - 0.5, run_id=run_id, method="ndr",
        latency_ns={"min": 811.0, "p50": 2345.5, "p90": 3100.25, "p99": 7012.0, "p99.9": 15000.0,
                    "max": 81234.0, "mean": 2501.125},
        ipdv_ns={"p50": 120.0, "p99": 900.5},
        dut_cpu={"1": 0.9725, "2": 0.4875}, dut_kthread_cpu={"napi/dut0-8193": 0.61},
        dut_drops={"xdp_drop": 17, "no_session": 3}, bpf_ns_per_packet=41.37, reordered=2, duplicates=1,
    )
    fields.update(kw)
    return TrialResult(**fields)
