"""The TRex backend without TRex: perfkit's field engine -> STLVm translation, the client call
sequence, TRex stats -> TrialResult, and the console profile, against the fakes in fake_trex.py."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Padding
from scapy.utils import rdpcap

from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators import create
from perfkit.generators.trex import (ENV_SERVER, GLOBAL_COUNTERS_NOTE, TRexGenerator, build_streams, latency_ns,
                                     split_load, stats_to_result, vm_instructions)
from perfkit.dataplanes.pgwu.control import UE_BASE, UL_TEID_BASE, SessionPlan
from perfkit.dataplanes.pgwu.model import emit
from perfkit.dataplanes.pgwu.traffic import SPORT_BASE
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.fieldengine import FieldEngine
from perfkit.scenario import Scenario
from tests.fake_trex import (FakeTRexClient, STLScVmRaw, STLTXCont, STLTXSingleBurst, STLVmFixChecksumHw, apply_vm,
                             fake_stl)

ROOT = Path(__file__).resolve().parent.parent
STL = fake_stl()


def kinds(vm: STLScVmRaw) -> list[tuple[str, dict]]:
    return [(type(c).__name__, c.kw) for c in vm.commands]


def data_stream(profile: PgwuTraffic, rate: float = 1e6, **kw):
    return build_streams(STL, profile, rate, **kw)[0]


# -- field engine -> STLVm ------------------------------------------------------------------------
def test_uplink_multiflow_translation_offsets_sizes_adds():
    """Untagged UL: Ether 14 + IP 20 + UDP 8 + GTP 8 -> TEID at 46, inner IPv4 at 50, inner UDP at 70."""
    vm = data_stream(PgwuTraffic(direction="ul", flows=8, plan=SessionPlan(count=8))).kw["packet"].kw["vm"]
    assert kinds(vm) == [
        ("STLVmFlowVar", {"name": "flow0", "init_value": None, "min_value": 0, "max_value": 7, "size": 4, "step": 1,
                          "op": "inc"}),
        ("STLVmWrFlowVar", {"fv_name": "flow0", "pkt_offset": 46, "offset_fixup": 0, "add_val": UL_TEID_BASE,
                            "is_big": True}),
        ("STLVmWrFlowVar", {"fv_name": "flow0", "pkt_offset": 62, "offset_fixup": 0, "add_val": UE_BASE,
                            "is_big": True}),
        ("STLVmWrMaskFlowVar", {"fv_name": "flow0", "pkt_offset": 70, "pkt_cast_size": 2, "mask": 0xFFFF, "shift": 0,
                                "add_value": SPORT_BASE, "offset_fixup": 0, "is_big": True}),
        ("STLVmFixIpv4", {"offset": 50}),
    ]


def test_downlink_multiflow_translation_tagged():
    """DL with a tenant tag: Ether 14 + 802.1Q 4 -> inner IPv4 at 18, dst at 34, sport at 38."""
    profile = PgwuTraffic(direction="dl", flows=16, plan=SessionPlan(count=16, tagged=True), vlan=True)
    vm = data_stream(profile, flow_op="random").kw["packet"].kw["vm"]
    assert [(n, k.get("pkt_offset", k.get("offset")), k.get("add_val", k.get("add_value"))) for n, k in kinds(vm)] == [
        ("STLVmFlowVar", None, None), ("STLVmWrFlowVar", 34, UE_BASE), ("STLVmWrMaskFlowVar", 38, SPORT_BASE),
        ("STLVmFixIpv4", 18, None)]
    assert vm.commands[0].kw["op"] == "random" and vm.commands[0].kw["max_value"] == 15


@pytest.mark.parametrize("direction,vlan,l4", [("ul", False, "udp"), ("ul", True, "udp"), ("dl", False, "udp"),
                                                ("ul", False, "tcp"), ("dl", True, "tcp")])
def test_translated_program_sends_every_flow_of_the_profile(direction, vlan, l4):
    """Run the STLVm program like TRex does: variable value i must give profile.packet(i) (uplink: from the
    GTP header on, the outer source stays flow 0's SGW by design), checksums included."""
    flows = 12
    profile = PgwuTraffic(direction=direction, flows=flows, plan=SessionPlan(count=flows, tagged=vlan), vlan=vlan,
                             inner_l4=l4, frame_size=128)
    builder = data_stream(profile).kw["packet"]
    start = profile.offsets()["gtp"] if direction == "ul" else 0
    for i in range(flows):
        sent = apply_vm(builder.kw["pkt_buffer"], builder.kw["vm"], i)
        assert sent[start:] == profile.packet(i)[start:], f"flow {i}"


def test_tcp_checksum_fixed_in_hardware_with_inner_offsets():
    profile = PgwuTraffic(direction="ul", flows=4, plan=SessionPlan(count=4), inner_l4="tcp", frame_size=128)
    fix = data_stream(profile).kw["packet"].kw["vm"].commands[-1]
    assert isinstance(fix, STLVmFixChecksumHw)
    assert fix.kw == {"l3_offset": 50, "l4_offset": 70, "l4_type": 13}


def test_single_flow_has_no_program_and_frame_is_padded_to_size():
    profile = PgwuTraffic(direction="ul", frame_size=64)
    builder = data_stream(profile).kw["packet"]
    assert builder.kw["vm"] is None and builder.kw["pkt"] is None
    assert len(builder.kw["pkt_buffer"]) == profile.wire_frame_size - 4 == 96
    # TRex's builder drops a trailing scapy Padding layer (remove_fcs): the IP lengths must cover the frame
    assert not Ether(builder.kw["pkt_buffer"]).haslayer(Padding)


def test_unknown_checksum_offset_is_a_config_error():
    engine = PgwuTraffic(direction="dl", flows=2, plan=SessionPlan(count=2)).field_engine()
    with pytest.raises(ConfigError, match="checksum offset: 99"):
        vm_instructions(STL, FieldEngine(engine.vars, engine.writes, (99,), 0, 0, l3_offset=14, l4_offset=34))


# -- streams and load split -----------------------------------------------------------------------
def test_split_load_keeps_the_total_rate_and_count():
    big = split_load(1e6, None, 1000)
    assert (big.data_pps, big.latency_pps, big.data_packets) == (999_000, 1000, None)
    small = split_load(5000, None, 1000)
    assert (small.data_pps, small.latency_pps) == (4500, 500)
    burst = split_load(1e5, 10_000, 1000)
    assert (burst.data_packets, burst.latency_packets) == (9900, 100)
    assert split_load(1e5, 5, 1000).latency_pps == 0  # too few packets for a latency sample: no stream
    assert split_load(1e6, None, 0).latency_pps == 0


def test_streams_modes_latency_and_macs():
    profile = PgwuTraffic(direction="dl", flows=4, plan=SessionPlan(count=4))
    data, lat = build_streams(STL, profile, 1e6, latency_pg_id=7)
    assert isinstance(data.kw["mode"], STLTXCont) and data.kw["mode"].kw == {"pps": 999_000.0}
    assert lat.kw["mode"].kw == {"pps": 1000.0} and lat.kw["flow_stats"].kw["pg_id"] == 7
    assert lat.kw["packet"].kw["vm"] is None and lat.kw["packet"].kw["pkt_buffer"] == profile.packet(0)
    assert data.kw["mac_src_override_by_pkt"] is True and data.kw["mac_dst_override_mode"] == STL.STLStreamDstMAC_PKT
    (burst,) = build_streams(STL, profile, 1e5, 12345, packet_macs=False)
    assert isinstance(burst.kw["mode"], STLTXSingleBurst) and burst.kw["mode"].kw == {"total_pkts": 12345, "pps": 1e5}
    assert burst.kw["mac_src_override_by_pkt"] is False and burst.kw["mac_dst_override_mode"] == 0


# -- stats -> TrialResult -------------------------------------------------------------------------
def trex_stats(tx=1_000_000, rx=990_000, tx_len=96, rx_len=60, pg_id=None):
    stats = {0: dict(opackets=tx, ipackets=0, obytes=tx * tx_len, ibytes=0, oerrors=0, ierrors=0),
             1: dict(opackets=0, ipackets=rx, obytes=0, ibytes=rx * rx_len, oerrors=0, ierrors=0),
             "global": {}, "total": {}, "flow_stats": {}, "latency": {}}
    if pg_id is not None:
        stats["latency"][pg_id] = {"latency": {"total_min": 12.0, "total_max": 150.0, "average": 30.0,
                                               "histogram": {10: 50, 20: 40, 100: 10}},
                                   "err_cntrs": {"dropped": 0, "dup": 2, "out_of_order": 0}}
    return stats


def test_stats_to_result_counts_bytes_with_fcs_and_l1_bits():
    sc = Scenario(frame_size=64, params={"direction": "ul"})
    r = stats_to_result(trex_stats(), sc, wire_frame_size=100, tx_port=0, rx_port=1, rate_pps=1e6, duration=1.0)
    assert (r.generator, r.intended_packets, r.tx_packets, r.rx_packets) == ("trex", 1_000_000, 1_000_000, 990_000)
    assert (r.tx_bytes, r.rx_bytes) == (100 * 1_000_000, 64 * 990_000)
    assert r.loss_ratio == pytest.approx(0.01)
    assert r.tx_bps_l1 == pytest.approx(1e6 * (100 + 20) * 8)
    assert r.rx_bps_l1 == pytest.approx(990_000 * (64 + 20) * 8)
    assert r.elapsed == 1.0 and r.latency_ns == {}
    assert GLOBAL_COUNTERS_NOTE in r.notes


def test_stats_to_result_latency_usec_to_ns_and_burst_counts():
    sc = Scenario(frame_size=128, params={"direction": "dl"})
    r = stats_to_result(trex_stats(tx=5000, rx=5000, pg_id=3), sc, wire_frame_size=128, tx_port=0, rx_port=1,
                        rate_pps=1e4, duration=9.0, packets=5000, latency_pg_id=3)
    assert (r.intended_packets, r.duration, r.elapsed) == (5000, 0.5, 0.5)
    # histogram 10..20: 50, 20..30: 40, 100..200: 10 packets; min 12, max 150 usec
    assert r.latency_ns == pytest.approx({"min": 12_000, "p50": 20_000, "p90": 30_000, "p99": 150_000,
                                          "p99.9": 150_000, "max": 150_000, "mean": 32_500})
    assert any("dup" in n for n in r.notes)


def test_latency_without_samples_is_empty():
    assert latency_ns({"total_min": 0, "total_max": 0, "histogram": {}}) == {}


# -- the generator and the client call sequence ---------------------------------------------------
def dut_for(profile: PgwuTraffic):
    return lambda frame: emit(frame, profile.config, profile.plan).out


def make(scenario: Scenario, client: FakeTRexClient | None = None, **options) -> tuple[TRexGenerator, FakeTRexClient]:
    profile = scenario.traffic()
    fake = client or FakeTRexClient(dut=dut_for(profile))

    def factory(server):
        fake.server = server
        return fake

    return TRexGenerator(scenario, client_factory=factory, stl=STL, server="trex-lab", **options), fake


def test_call_sequence_and_result_uplink():
    sc = Scenario(frame_size=64, flows=100, params={"direction": "ul"})
    gen, fake = make(sc, FakeTRexClient(dut=dut_for(sc.traffic()), capacity_pps=800_000))
    with gen:
        r = gen.measure(1e6, 2.0)
    assert fake.call_names == ["connect", "reset", "add_streams", "clear_stats", "start", "wait_on_traffic",
                               "get_stats", "disconnect"]
    calls = dict(fake.calls)
    assert calls["reset"]["ports"] == [0, 1] and calls["add_streams"]["ports"] == [0]
    assert calls["start"] == {"ports": [0], "mult": "1", "force": True, "duration": 2.0}
    assert calls["wait_on_traffic"]["ports"] == [0] and calls["wait_on_traffic"]["timeout"] >= 2
    assert fake.server == "trex-lab"
    assert (r.intended_packets, r.tx_packets, r.rx_packets) == (2_000_000, 2_000_000, 1_600_000)
    assert r.loss_ratio == pytest.approx(0.2)
    assert (r.wire_frame_size, r.rx_frame_size) == (100, 64)  # decapsulated: 36 bytes less, FCS counted


def test_downlink_uses_port_1_and_burst_mode():
    gen, fake = make(Scenario(frame_size=128, params={"direction": "dl"}))
    with gen:
        r = gen.measure(1e5, 1.0, packets=1000)
    start = dict(fake.calls)["start"]
    assert start["ports"] == [1] and start["duration"] == -1
    (stream,) = dict(fake.calls)["add_streams"]["streams"]
    assert stream.kw["mode"].kw == {"total_pkts": 1000, "pps": 1e5}
    assert (r.tx_packets, r.rx_packets, r.rx_frame_size) == (1000, 1000, 128 + 36)


def test_l3_mode_in_service_mode_and_port_macs():
    gen, fake = make(Scenario(), l3={0: ("10.0.0.2", "10.0.0.1"), 1: ("10.1.0.2", "10.1.0.1")}, l2=None)
    with gen:
        gen.measure(1e4, 1.0)
    names = fake.call_names
    assert names[names.index("reset") + 1:names.index("add_streams")] == [
        "set_service_mode", "set_l3_mode", "set_l3_mode", "set_service_mode"]
    assert [kw["enabled"] for n, kw in fake.calls if n == "set_service_mode"] == [True, False]
    (stream,) = dict(fake.calls)["add_streams"]["streams"]
    assert stream.kw["mac_src_override_by_pkt"] is False and stream.kw["mac_dst_override_mode"] == 0


def test_l2_mode_sets_destination_macs():
    gen, fake = make(Scenario(), l2={0: "aa:bb:cc:00:00:01"})
    with gen:
        gen.measure(1e4, 1.0)
    assert ("set_l2_mode", {"port": 0, "dst_mac": "aa:bb:cc:00:00:01"}) in fake.calls


def test_latency_stream_gives_percentiles_in_ns():
    gen, fake = make(Scenario(flows=10, params={"direction": "ul"}), latency_pg_id=5)
    with gen:
        r = gen.measure(1e6, 1.0)
    assert len(dict(fake.calls)["add_streams"]["streams"]) == 2
    assert r.tx_packets == 1_000_000  # data 999 000 + latency 1 000: the rate asked for, no more
    assert r.latency_ns["p50"] == pytest.approx(20_000) and r.latency_ns["max"] == pytest.approx(150_000)


@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_capture_is_saved_and_checked_with_the_model(tmp_path, direction):
    sc = Scenario(flows=20, params={"direction": direction})
    gen, fake = make(sc, capture=tmp_path / "rx.pcap", capture_count=8)
    with gen:
        r = gen.measure(1e5, 1.0)
    assert r.mismatched_packets == 0
    assert len(rdpcap(str(tmp_path / "rx.pcap"))) == 8
    names = fake.call_names
    assert names.index("start_capture") < names.index("start") < names.index("stop_capture")
    assert dict(fake.calls)["start_capture"]["bpf_filter"] == "ip or (vlan and ip)"


def test_capture_mismatch_is_counted_and_noted(tmp_path):
    sc = Scenario(flows=4, params={"direction": "ul"})
    client = FakeTRexClient(dut=dut_for(sc.traffic()), corrupt_capture=True)
    gen, _ = make(sc, client, capture=tmp_path / "rx.pcap", capture_count=4)
    with gen:
        r = gen.measure(1e4, 1.0)
    assert r.mismatched_packets == 1
    assert any("1 of 4 captured packets are not what the PGW-U should emit" in n for n in r.notes)


def test_disconnects_on_close_after_an_exception():
    gen, fake = make(Scenario(), FakeTRexClient(fail_on="wait_on_traffic"))
    with pytest.raises(RuntimeError, match="wait_on_traffic failed"):
        with gen:
            gen.measure(1e4, 1.0)
    assert fake.call_names[-1] == "disconnect"
    gen.close()  # idempotent
    assert fake.call_names.count("disconnect") == 1
    with pytest.raises(PerfkitError, match="closed"):
        gen.measure(1e4, 1.0)


def test_disconnects_when_connect_fails():
    fake = FakeTRexClient(fail_on="connect")
    with pytest.raises(RuntimeError):
        make(Scenario(), fake)
    assert fake.call_names == ["connect", "disconnect"]


def test_create_by_name():
    gen = create("trex", Scenario(params={"direction": "dl"}), client_factory=lambda server: FakeTRexClient(), stl=STL,
                 server="x")
    with gen:
        assert isinstance(gen, TRexGenerator) and gen.name == "trex"
        assert gen.measure(1e3, 1.0).generator == "trex"


# -- options and errors ---------------------------------------------------------------------------
def test_missing_client_library_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "trex.stl.api", None)
    with pytest.raises(PerfkitError, match=r"TRex client library is missing.*automation/trex_control_plane/"
                                           r"interactive to PYTHONPATH"):
        TRexGenerator(Scenario(), server="trex-lab")


def test_server_from_environment_or_error(monkeypatch):
    monkeypatch.delenv(ENV_SERVER, raising=False)
    with pytest.raises(ConfigError, match=f"server: None is not allowed.*{ENV_SERVER}"):
        TRexGenerator(Scenario(), stl=STL)
    monkeypatch.setenv(ENV_SERVER, "trex-lab-7")
    fake = FakeTRexClient()
    gen = TRexGenerator(Scenario(), stl=STL, client_factory=lambda server: setattr(fake, "server", server) or fake)
    gen.close()
    assert fake.server == "trex-lab-7"


@pytest.mark.parametrize("options,field", [({"tx_port": -1}, "tx_port"), ({"rx_port": "1"}, "rx_port"),
                                           ({"flow_op": "zigzag"}, "flow_op"), ({"latency_pg_id": -3}, "latency_pg_id"),
                                           ({"l2": {0: "aa:bb:cc:dd:ee:ff"}, "l3": {0: ("1.1.1.1", "1.1.1.2")}},
                                            "l2/l3 ports")])
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError) as err:
        make(Scenario(flows=2), **options)
    assert err.value.field == field


def test_bad_trial_arguments():
    gen, _ = make(Scenario())
    with gen:
        for args, field in (((0, 1.0), "rate"), ((1e3, -1.0), "duration"), ((1e3, 1.0, 0), "packets")):
            with pytest.raises(ConfigError) as err:
                gen.measure(*args)
            assert err.value.field == field


# -- the console profile --------------------------------------------------------------------------
@pytest.fixture()
def profile_module(monkeypatch) -> ModuleType:
    """trex_profiles/pgwu.py imported the way TRex does (by file), with a fake trex.stl.api."""
    api = ModuleType("trex.stl.api")
    api.__dict__.update(vars(fake_stl()))
    for name, mod in (("trex", ModuleType("trex")), ("trex.stl", ModuleType("trex.stl")), ("trex.stl.api", api)):
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("pgwu_trex_profile", ROOT / "trex_profiles" / "pgwu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_follows_trex_loader_rules(profile_module):
    func = profile_module.register().get_streams
    # TRex's STLProfile.get_module_tunables: every get_streams argument needs a default
    assert len(func.__defaults__) == func.__code__.co_argcount - 1


def test_profile_keyword_tunables_old_console(profile_module):
    """``-t frame_size=128,flows=100`` (TRex passes direction = port % 2 and the values as keywords)."""
    (stream,) = profile_module.register().get_streams(direction=0, port_id=0, frame_size=128, flows=100)
    frame = stream.kw["packet"].kw["pkt_buffer"]
    assert len(frame) == 128 + 36 - 4  # uplink GTP-U, no FCS
    assert stream.kw["packet"].kw["vm"].commands[0].kw["max_value"] == 99
    (dl,) = profile_module.register().get_streams(direction=1, port_id=1)
    assert len(dl.kw["packet"].kw["pkt_buffer"]) == 60
    (forced,) = profile_module.register().get_streams(direction=0, port_id=0, dir="dl")
    assert len(forced.kw["packet"].kw["pkt_buffer"]) == 60


def test_profile_argparse_tunables_new_console(profile_module):
    streams = profile_module.register().get_streams(
        direction=0, port_id=0, tunables=["--dir", "dl", "--frame-size", "256", "--flows", "50",
                                          "--latency_pg_id", "9", "--pps", "20000"])
    data, lat = streams
    assert len(data.kw["packet"].kw["pkt_buffer"]) == 252
    assert data.kw["mode"].kw["pps"] + lat.kw["mode"].kw["pps"] == 20000
    assert lat.kw["flow_stats"].kw["pg_id"] == 9


def test_profile_rejects_unknown_tunables_and_directions(profile_module):
    with pytest.raises(ConfigError, match="tunable: 'rate'"):
        profile_module.register().get_streams(rate=5)
    with pytest.raises(ConfigError, match="dir: 'up'"):
        profile_module.register().get_streams(dir="up")
    with pytest.raises(SystemExit):
        profile_module.register().get_streams(tunables=["--nope", "1"])
