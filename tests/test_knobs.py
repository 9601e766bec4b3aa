"""System knobs (``perfkit.knobs``): checked before a testbed comes up, set on the real testbed's DUT
ports and read back, recorded in every trial, restored on close and, after a SIGKILL, by
``perfkit clean``."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit import knobs
from perfkit.cli import main
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.scenario import Scenario
from perfkit.testbed import netns

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
UL = {"direction": "ul"}


def gro(ns: str, dev: str) -> str:
    out = netns.run(ns, "ethtool", "-k", dev)
    return next(line.split(": ")[1].split()[0] for line in out.splitlines() if line.startswith("generic-receive-offload"))


@pytest.mark.parametrize("text, field", [
    ("gro", "--knob"), ("gro=maybe", "knob gro"), ("nosuch=1", "knob"), ("napi_defer_hard_irqs=-1", "knob napi_defer_hard_irqs"),
    ("sysctl.kernel.panic=1", "knob"), ("sysctl.net.core.busy_poll=1\n2", "knob sysctl.net.core.busy_poll"),
])
def test_a_bad_knob_is_refused_naming_it(text, field):
    with pytest.raises(ConfigError) as err:
        knobs.parse([text])
    assert err.value.field == field


def test_knobs_are_part_of_the_scenario_and_its_key():
    plain = Scenario(params=UL)
    tuned = Scenario(params=UL, knobs={"gro": False, "ethtool.rx-udp-gro-forwarding": "ON"})
    assert dict(tuned.knobs) == {"gro": "off", "ethtool.rx-udp-gro-forwarding": "on"}
    assert tuned.key == plain.key + "-ethtool.rx-udp-gro-forwarding=on-gro=off"
    assert hash(tuned) != hash(plain)


def test_a_generator_that_cannot_set_knobs_refuses_them():
    with pytest.raises(ConfigError) as err:
        create("sim", Scenario(params=UL, knobs={"gro": "off"}))
    assert err.value.field == "--knob"


def test_a_knob_reads_back_during_the_trial_is_in_the_result_and_is_restored():
    scenario = Scenario(frame_size=64, flows=1, params=UL, knobs={"gro": "off", "napi_defer_hard_irqs": "2"})
    with create("xdp", scenario) as gen:
        a, b = gen.testbed.a, gen.testbed.b
        before = {(s["dev"], s["target"]): s["value"] for s in gen.knobs.before}
        assert before[(a.dev, "generic-receive-offload")] == "on"   # XDP on a veth turns its GRO on
        assert json.loads(knobs.record_path(gen.testbed.rid).read_text())["settings"]  # on disk
        r = gen.measure(100_000, 0.2)
        assert r.knobs == {"gro": "off", "napi_defer_hard_irqs": "2"} and r.rx_packets > 0
        assert json.loads(r.to_record()["knobs"]) == r.knobs
        assert gro(a.ns, a.dev) == gro(b.ns, b.dev) == "off"
        lines = gen.knobs.close()
        assert gro(a.ns, a.dev) == "on" and netns.run(a.ns, "cat", f"/sys/class/net/{a.dev}/napi_defer_hard_irqs").strip() == "0"
        assert len(lines) == 4 and not any("NOT restored" in line for line in lines)
        assert not knobs.record_path(gen.testbed.rid).exists()


def test_a_feature_the_driver_refuses_is_one_line_naming_the_knob():
    scenario = Scenario(frame_size=64, flows=1, params=UL, knobs={"lro": "on"})  # veth: large-receive-offload [fixed]
    with pytest.raises(Exception) as err:
        create("xdp", scenario)
    assert "knob lro=on" in str(err.value) and "\n" not in str(err.value)
    assert not knobs.records()


def test_perfkit_clean_restores_the_knobs_of_a_trial_killed_by_sigkill():
    busy_poll = Path("/proc/sys/net/core/busy_poll")
    old = busy_poll.read_text().strip()
    new = "37" if old != "37" else "38"
    proc = subprocess.Popen([sys.executable, "-m", "perfkit", "trial", "--knob", "gro=off", "--knob",
                             f"sysctl.net.core.busy_poll={new}", "--rate", "10kpps", "--duration", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not knobs.records() or busy_poll.read_text().strip() != new:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else ""
            time.sleep(0.1)
        rid = knobs.records()[0]
        time.sleep(1)                                         # the trial is running
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    dut_ns, dev = f"pk{rid}-dut", f"d{rid}a"
    assert gro(dut_ns, dev) == "off" and busy_poll.read_text().strip() == new    # nobody restored them
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["clean", "--json"]) == 0
    done = json.loads(buf.getvalue())
    assert f"knob gro on {dev} generic-receive-offload: on" in done, done
    assert busy_poll.read_text().strip() == old
    assert not knobs.records() and not netns.exists(dut_ns)


def test_a_campaigns_knobs_are_an_axis_and_build_options_go_to_params():
    from perfkit.campaign.schema import parse_campaign

    c = parse_campaign("dataplane: pgwu\nparams: {direction: ul}\nknobs: {gro: [on, off], session_table: [hash, teid_array]}\n"
                       "frame_sizes: [64]\nmethods: [maxrate]\n")
    assert [s.key for s in c.scenarios()] == ["pgwu-ul-64B-1flow-1core-gro=on", "pgwu-ul-64B-1flow-1core-gro=off",
                                              "pgwu-ul-64B-1flow-1core-teidarray-gro=on",
                                              "pgwu-ul-64B-1flow-1core-teidarray-gro=off"]
    with pytest.raises(ConfigError) as err:
        parse_campaign("dataplane: pgwu\nknobs: {gro: off}\nframe_sizes: [64]\nmethods: [maxrate]\n"
                       "generator: {backend: sim}\n")
    assert err.value.field == "campaign.knobs"
