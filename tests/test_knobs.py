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
from tests.counting import QUIET_RATE

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
UL = {"direction": "ul"}


def gro(ns: str, dev: str) -> str:
    out = netns.run(ns, "ethtool", "-k", dev)
    return next(line.split(": ")[1].split()[0] for line in out.splitlines() if line.startswith("generic-receive-offload"))


@pytest.mark.parametrize("text, field", [
    ("gro", "--knob"), ("gro=maybe", "knob gro"), ("nosuch=1", "knob"), ("napi_defer_hard_irqs=-1", "knob napi_defer_hard_irqs"),
    ("sysctl.kernel.panic=1", "knob"), ("sysctl.net.core.busy_poll=1\n2", "knob sysctl.net.core.busy_poll"),
    ("threaded=2", "knob threaded"), ("channels.rxx=1", "knob"), ("ring.rx=big", "knob ring.rx"),
])
def test_a_bad_knob_is_refused_naming_it(text, field):
    with pytest.raises(ConfigError) as err:
        knobs.parse([text])
    assert err.value.field == field


def test_knobs_are_part_of_the_scenario_and_its_key():
    plain = Scenario(params=UL)
    tuned = Scenario(params=UL, knobs={"gro": False, "ethtool.rx-udp-gro-forwarding": "ON"})
    assert dict(tuned.knobs) == {"gro": "off", "ethtool.rx-udp-gro-forwarding": "on"}
    assert tuned.key == plain.key + "-ethtool.rx-udp-gro-forwarding_on-gro_off"
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


def test_threaded_napi_and_a_channel_count_read_back_during_the_trial_and_are_restored():
    scenario = Scenario(frame_size=64, flows=1, params=UL, knobs={"threaded": "on", "channels.rx": "1"})
    with create("xdp", scenario) as gen:
        a = gen.testbed.a
        before = {(s["dev"], s["name"]): s["value"] for s in gen.knobs.before}
        assert before[(a.dev, "threaded")] == "on" and before[(a.dev, "channels.rx")] == "1"  # the testbed's own
        assert netns.run(a.ns, "cat", f"/sys/class/net/{a.dev}/threaded").strip() == "1"
        threads = subprocess.run(["ps", "-e", "-o", "comm="], capture_output=True, text=True).stdout.split()
        assert any(t.startswith(f"napi/{a.dev}"[:15]) for t in threads)  # a kernel thread polls the port
        r = gen.measure(100_000, 0.2)
        assert r.knobs == {"threaded": "on", "channels.rx": "1"} and r.rx_packets > 0
        lines = gen.knobs.close()
        assert len(lines) == 4 and not any("NOT restored" in line for line in lines)


def _mine(before: set[str]) -> list[str]:
    """Knob records written since ``before`` (leftovers of other processes are not this test's)."""
    return sorted(set(knobs.records()) - before)


def test_threaded_napi_off_is_refused_where_the_dut_is_measured_on_its_napi_threads():
    before = set(knobs.records())
    with pytest.raises(ConfigError) as err:
        create("xdp", Scenario(params=UL, knobs={"threaded": "off"}))
    assert err.value.field == "knob threaded" and "NAPI threads" in str(err.value)
    assert not _mine(before)


def test_gro_on_a_kernel_path_aggregates_what_the_socket_gets_and_gro_off_does_not():
    """Seed 000's sweep on the real testbed: traffic the PGW-U passes to its kernel (direction=host)
    is delivered to a socket on the DUT. With the DUT port's GRO on, at full speed the socket gets
    packets of many datagrams; with it off, one each. At a low rate every datagram arrives."""
    full = {}
    for gro in ("on", "off"):
        with create("xdp", Scenario(frame_size=64, flows=4, params={"direction": "host"}, knobs={"gro": gro})) as gen:
            low = gen.measure(QUIET_RATE, 5.0, packets=5000)
            assert low.rx_packets == low.tx_packets == 5000 and low.dut_drops == {} and low.mismatched_packets == 0
            full[gro] = gen.measure(None, 0.5)
    assert full["on"].socket_datagrams_per_skb > 4 and full["on"].knobs == {"gro": "on"}
    assert full["off"].socket_datagrams_per_skb == 1.0


def test_host_traffic_needs_a_generator_that_counts_at_a_socket():
    from perfkit.campaign.backend import preflight
    from perfkit.campaign.schema import parse_campaign

    with pytest.raises(ConfigError) as err:
        create("sim", Scenario(params={"direction": "host"}))
    assert err.value.field == "traffic"
    campaign = parse_campaign("name: t\ndataplane: pgwu\nparams: {direction: host}\nframe_sizes: [64]\n"
                              "generator: {backend: sim}\n"
                              "methods: [{method: maxrate}]\n")
    with pytest.raises(ConfigError) as err:   # before the campaign starts
        preflight(campaign)
    assert err.value.field.startswith("campaign.traffic")


def test_a_knob_record_of_another_namespace_is_kept_while_it_lives_and_forgotten_once_it_is_gone():
    from perfkit import owners

    rid, ns = "test-other-ns", f"pkknob{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        inode = os.stat(f"/run/netns/{ns}").st_ino
        owners.write_json(knobs.record_path(rid), {"owner": {"pid": 2**22 + 1, "start": 0}, "netns": inode, "settings": [
            {"kind": "ethtool", "name": "gro", "ns": "", "dev": "a1", "target": "generic-receive-offload", "value": "on"}]})
        assert knobs.clean(rid) == [] and knobs.record_path(rid).exists()    # a clean there restores it
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)
    try:
        assert knobs.clean(rid) == [] and not knobs.record_path(rid).exists()  # gone with its namespace
    finally:
        knobs.record_path(rid).unlink(missing_ok=True)


def test_a_socket_figure_read_back_as_nan_is_none():
    from perfkit.trial import TrialResult

    sc = Scenario(params={"direction": "host"})
    rec = TrialResult.for_scenario(sc, wire_frame_size=64, generator="xdp", duration=1.0, intended_pps=1.0,
                                   intended_packets=1, tx_packets=1, rx_packets=1).to_record()
    rec["socket_datagrams_per_skb"] = float("nan")
    assert TrialResult.from_record(rec).socket_datagrams_per_skb is None


@pytest.mark.parametrize("knob, says", [
    ({"lro": "on"}, "knob lro=on"),                         # veth: large-receive-offload [fixed]
    ({"ring.rx": "512"}, "knob ring.rx refused"),           # veth has no rings (ethtool -g: not supported)
    ({"channels.rx": "2"}, "knob channels.rx=2 refused"),   # the testbed's veths have one queue
])
def test_a_setting_the_driver_refuses_is_one_line_naming_the_knob(knob, says):
    scenario = Scenario(frame_size=64, flows=1, params=UL, knobs=knob)
    before = set(knobs.records())
    with pytest.raises(Exception) as err:
        create("xdp", scenario)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert not _mine(before)


def test_perfkit_clean_restores_the_knobs_of_a_trial_killed_by_sigkill():
    busy_poll = Path("/proc/sys/net/core/busy_poll")
    old = busy_poll.read_text().strip()
    new = "37" if old != "37" else "38"
    before = set(knobs.records())
    proc = subprocess.Popen([sys.executable, "-m", "perfkit", "trial", "--knob", "gro=off", "--knob",
                             f"sysctl.net.core.busy_poll={new}", "--rate", "10kpps", "--duration", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _mine(before) or busy_poll.read_text().strip() != new:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else ""
            time.sleep(0.1)
        rid = _mine(before)[0]
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
    assert rid not in knobs.records() and not netns.exists(dut_ns)


def test_a_campaigns_knobs_are_an_axis_and_build_options_go_to_params():
    from perfkit.campaign.schema import parse_campaign

    c = parse_campaign("dataplane: pgwu\nparams: {direction: ul}\nknobs: {gro: [on, off], session_table: [hash, teid_array]}\n"
                       "frame_sizes: [64]\nmethods: [maxrate]\n")
    assert [s.key for s in c.scenarios()] == ["pgwu-ul-64B-1flow-1core-gro_on", "pgwu-ul-64B-1flow-1core-gro_off",
                                              "pgwu-ul-64B-1flow-1core-teidarray-gro_on",
                                              "pgwu-ul-64B-1flow-1core-teidarray-gro_off"]
    with pytest.raises(ConfigError) as err:
        parse_campaign("dataplane: pgwu\nknobs: {gro: off}\nframe_sizes: [64]\nmethods: [maxrate]\n"
                       "generator: {backend: sim}\n")
    assert err.value.field == "campaign.knobs"


# -- campaigns of several grids (parts) ------------------------------------------------------------
def test_the_findings_campaign_is_four_grids_with_one_knob_changed_in_each():
    from perfkit.campaign.schema import load_campaign

    c = load_campaign("campaigns/findings.yaml", cpus=2)
    keys = [s.key for s in c.scenarios()]
    assert len(keys) == len(set(keys)) == 20
    tables = {s.params["session_table"] for s in c.scenarios() if s.flows == 1001000}
    assert tables == {"hash", "percpu_hash", "lru_percpu_hash", "teid_array"}
    assert {s.knobs["steering"] for s in c.scenarios() if s.dut_cores == 2} == {"dataplane", "5tuple"}
    assert {(s.frame_size, s.params["udp_csum"]) for s in c.scenarios() if s.params["direction"] == "dl"} == \
        {(f, csum) for f in (64, 256, 512, 1024, 1424) for csum in (False, True)}
    host = [s for s in c.scenarios() if s.params["direction"] == "host"]
    assert {(s.flows, s.knobs["gro"]) for s in host} == {(f, g) for f in (1, 16) for g in ("on", "off")}
    assert all(s.traffic().to_socket and not s.params["vlan"] for s in host)  # untagged: the kernel has no VLAN port


@pytest.mark.parametrize("parts, field", [
    ("[]", "campaign.parts"), ("[{frame_sizes: [3]}]", "campaign.parts[0].frame_sizes[0]"),
    ("[{knobs: {gro: maybe}}]", "campaign.parts[0].knobs.gro"), ("[{bogus: 1}]", "campaign.parts[0].bogus"),
    ("[{knobs: {steering: 5tuple}}]", "campaign.knob steering"),   # one DUT core needs no steering
])
def test_a_bad_part_is_refused_naming_it(parts, field):
    from perfkit.campaign.schema import parse_campaign

    with pytest.raises(ConfigError) as err:
        parse_campaign(f"dataplane: pgwu\nframe_sizes: [64]\nmethods: [maxrate]\nparts: {parts}\n")
    assert err.value.field == field


# -- what each knob did (perfkit.analysis.knobs) ---------------------------------------------------
def _run(rows: list[tuple[dict, dict, float]], per_skb: float | None = None):
    """A run of max-rate trials: (params, knobs, DUT ns per packet) each; ``per_skb``: the trials'
    socket_datagrams_per_skb."""
    import pandas as pd

    from perfkit.analysis.run import RunData, trial_frame
    from perfkit.trial import TrialResult

    records = []
    for params, kn, ns in rows:
        sc = Scenario("pgwu", 64, params=params, knobs=kn)
        r = TrialResult.for_scenario(sc, wire_frame_size=100, generator="xdp", duration=1.0, intended_pps=1e6,
                                     intended_packets=1_000_000, tx_packets=1_000_000, rx_packets=1_000_000,
                                     method="maxrate", dut_ns_per_packet=ns, elapsed=1.0,
                                     socket_datagrams_per_skb=per_skb)
        records.append(r.to_record())
    return RunData("r", None, {}, trial_frame(pd.DataFrame(records)), [])


def test_a_knob_with_a_clear_effect_gets_an_interval_that_excludes_zero():
    from perfkit.analysis import knobs as ak

    run = _run([(UL, {"gro": "on"}, ns) for ns in (300, 306, 297)] + [(UL, {"gro": "off"}, ns) for ns in (350, 358, 340)])
    e = ak.knob_effects(run)
    row = e[(e["knob"] == "gro") & (e["metric"] == "dut_ns_per_packet")].iloc[0]
    assert (row["value"], row["baseline"], row["n"], row["n_baseline"]) == ("off", "on", 3, 3)
    assert row["change"] == pytest.approx(48.333, abs=1e-2) and 25 < row["ci_low"] < row["ci_high"] < 70
    assert row["verdict"] == "higher"


def test_no_effect_beyond_the_noise_is_said_as_such_and_one_trial_has_no_interval():
    from perfkit.analysis import knobs as ak

    noisy = _run([(UL, {"gro": "on"}, ns) for ns in (300, 340, 320)] + [(UL, {"gro": "off"}, ns) for ns in (310, 335, 318)])
    assert set(ak.knob_effects(noisy)["verdict"]) <= {ak.NO_EFFECT}
    once = _run([({**UL, "udp_csum": False}, {}, 300.0), ({**UL, "udp_csum": True}, {}, 400.0)])
    e = ak.knob_effects(once)
    assert set(e["knob"]) == {"udp_csum"} and set(e["verdict"]) == {ak.NO_INTERVAL}


def test_what_a_socket_on_the_dut_was_delivered_is_shown_only_for_traffic_to_the_kernel():
    from perfkit.analysis import knobs as ak

    host = {"direction": "host"}
    run = _run([(host, {"gro": "on"}, ns) for ns in (600, 610, 605)], per_skb=63.5)
    got = ak.socket_delivery(run)
    assert list(got["datagrams per socket packet"]) == [63.5] and list(got["trials"]) == [3]
    assert got["DUT ns per datagram"].iloc[0] == 605 and got["delivered Mpps"].iloc[0] == pytest.approx(1.0)
    assert ak.socket_delivery(_run([(UL, {}, 300.0)])).empty


def test_changed_functions_name_what_got_dearer():
    from perfkit.perf.flamegraph import diff_flamegraph_svg
    from perfkit.perf.report import changed_functions

    before = "napi/x;xdp_do;bpf_prog_1_xdp_pgwu 90\nswapper;cpu_idle 10\n"
    after = "napi/x;xdp_do;bpf_prog_1_xdp_pgwu 50\nnapi/x;xdp_do;bpf_prog_1_xdp_pgwu;bpf_csum_diff;csum_partial 40\n" \
            "swapper;cpu_idle 10\n"
    tab = changed_functions(before, after, n=3)
    assert list(tab["symbol"][:2]) in (["bpf_csum_diff", "csum_partial"], ["csum_partial", "bpf_csum_diff"])
    assert tab["change"].iloc[0] == pytest.approx(100 * 40 / 90)
    assert "<svg" in diff_flamegraph_svg(before, after, "csum on vs off")


# -- knobs the DUT takes as it loads ---------------------------------------------------------------
def test_steering_on_the_5tuple_puts_a_tunnels_packets_on_one_core_and_the_dataplanes_key_spreads_them():
    """Seed 001's RSS finding on 2 DUT cores: GTP-U's outer 5-tuple is the same for every bearer."""
    spread = {}
    for steering in ("dataplane", "5tuple"):
        sc = Scenario(frame_size=64, flows=1000, dut_cores=2, params={**UL, "sessions": 1000}, knobs={"steering": steering})
        with create("xdp", sc) as gen:
            r = gen.measure(20_000, 5.0, packets=6000)
        assert r.knobs == {"steering": steering} and r.mismatched_packets == 0
        per_core = r.dut_packets_per_core
        # the DUT's cores saw every frame sent; a stall can still overflow the tester's ring after them
        assert len(per_core) == 2 and sum(per_core.values()) == r.tx_packets == 6000 and r.dut_drops == {}
        spread[steering] = min(per_core.values()) / sum(per_core.values())
    assert spread["5tuple"] == 0 and spread["dataplane"] > 0.3


def test_generic_xdp_forwards_on_the_kernels_skb_path():
    sc = Scenario(frame_size=64, flows=1, params=UL, knobs={"xdp_mode": "generic"})
    with create("xdp", sc) as gen:
        out = netns.run(gen.testbed.a.ns, "ip", "-d", "link", "show", gen.testbed.a.dev)
        r = gen.measure(50_000, 0.3)
    assert "xdpgeneric" in out and r.knobs == {"xdp_mode": "generic"}
    assert r.rx_packets > 0 and r.mismatched_packets == 0


def test_steering_needs_several_dut_cores():
    with pytest.raises(ConfigError) as err:
        Scenario(params=UL, knobs={"steering": "5tuple"})
    assert err.value.field == "knob steering"


def test_two_builds_of_one_program_compare_as_one_function():
    from perfkit.perf.report import changed_functions

    before = "napi/x;bpf_prog_55de28cda8ea9ac6_xdp_pgwu;lookup_nulls_elem_raw 60\nnapi/x;bpf_prog_55de28cda8ea9ac6_xdp_pgwu 40\n"
    after = "napi/x;bpf_prog_46facedd3322f884_xdp_pgwu 100\n"
    tab = changed_functions(before, after, n=2).set_index("symbol")
    assert tab.loc["lookup_nulls_elem_raw", "change"] == -60
    assert tab.loc["bpf_prog_0000000000000000_xdp_pgwu", "change"] == 0      # one function, 100 % both times
