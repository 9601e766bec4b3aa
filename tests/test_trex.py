"""The TRex backend against TRex's real client library (lbr-trex-client 3.4.0 = TRex v3.04's
Python client, in ``build/trex-venv``, run by perfkit's TRex worker).

Everything that needs no server uses the real library only: TRex's ``STLStream``/``STLPktBuilder``/
``STLVm*`` classes check and encode perfkit's streams, and the tests read the JSON a TRex server
would receive. Where a server is needed, TRex's real ``STLClient`` talks JSON-RPC over ZMQ to
``FakeTRexRpcServer`` (tests/fake_trex_rpc_server.py), which stands in for a TRex server that cannot
run here; the tests check what it received and what perfkit made of its counters.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from scapy.utils import rdpcap

from perfkit.dataplanes.pgwu.control import UE_BASE, UL_TEID_BASE, SessionPlan
from perfkit.dataplanes.pgwu.model import emit
from perfkit.dataplanes.pgwu.traffic import SPORT_BASE, PgwuTraffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators import create
from perfkit.generators.trex import ENV_SERVER, TRexGenerator
from perfkit.scenario import Scenario
from perfkit.stl.fieldengine import FieldEngine, FieldWrite, FlowVar
from perfkit.trex import client as trex_client
from perfkit.trex.client import TRexWorker, WorkerError, load_profile
from perfkit.trex.stats import GLOBAL_COUNTERS_NOTE, latency_ns, stats_to_result
from perfkit.trex.streams import build_streams, split_load, streams_json, vm_instructions
from tests.fake_trex_rpc_server import FakeTRexRpcServer

ROOT = Path(__file__).resolve().parent.parent
#: TRex's CTRexVmInsFixHwCs constants as the server receives them (``l4_type``).
L4_TYPE_UDP, L4_TYPE_TCP = 11, 13
#: TRex's stream ``flags``: bit 0 source MAC from the packet, bits 1-2 destination MAC mode (1: packet).
FLAGS_PACKET_MACS, FLAGS_PORT_MACS = 3, 0
GATEWAYS = {"198.18.0.1": "02:00:00:00:0a:01", "198.19.0.1": "02:00:00:00:0b:01"}


@pytest.fixture(scope="module")
def worker():
    """One TRex worker for the tests that only build streams (TRex's import takes about a second)."""
    with TRexWorker() as w:
        yield w


def data_json(worker, profile, rate: float = 1e6, **kw) -> dict:
    return streams_json(build_streams(profile, rate, **kw), worker)[0]


def instructions(stream: dict) -> list[dict]:
    return stream["vm"]["instructions"]


# -- perfkit's field engine -> TRex's STLVm program (the JSON TRex receives) -------------------------
def test_uplink_multiflow_program_as_trex_encodes_it(worker):
    """Untagged UL: Ether 14 + IP 20 + UDP 8 + GTP 8 -> TEID at 46, inner IPv4 at 50, inner UDP at 70."""
    stream = data_json(worker, PgwuTraffic(direction="ul", flows=8, plan=SessionPlan(count=8)))
    assert instructions(stream) == [
        {"type": "flow_var", "name": "flow0", "size": 4, "op": "inc", "next_var": None, "split_to_cores": True,
         "init_value": 0, "min_value": 0, "max_value": 7, "step": 1},
        {"type": "write_flow_var", "name": "flow0", "pkt_offset": 46, "add_value": UL_TEID_BASE, "is_big_endian": True},
        {"type": "write_flow_var", "name": "flow0", "pkt_offset": 62, "add_value": UE_BASE, "is_big_endian": True},
        {"type": "write_mask_flow_var", "name": "flow0", "pkt_offset": 70, "pkt_cast_size": 2, "mask": 0xFFFF,
         "shift": 0, "add_value": SPORT_BASE, "is_big_endian": True},
        {"type": "fix_checksum_ipv4", "pkt_offset": 50},
    ]


def test_downlink_tagged_random_program(worker):
    """DL with a tenant tag: Ether 14 + 802.1Q 4 -> inner IPv4 at 18, dst at 34, sport at 38."""
    profile = PgwuTraffic(direction="dl", flows=16, plan=SessionPlan(count=16, tagged=True), vlan=True)
    stream = data_json(worker, profile, flow_op="random")
    got = [(i["type"], i.get("pkt_offset"), i.get("add_value")) for i in instructions(stream)]
    assert got == [("flow_var", None, None), ("write_flow_var", 34, UE_BASE),
                   ("write_mask_flow_var", 38, SPORT_BASE), ("fix_checksum_ipv4", 18, None)]
    assert instructions(stream)[0]["op"] == "random" and instructions(stream)[0]["max_value"] == 15
    assert stream["random_seed"] == 0x5EED


def _field(frame: bytes, offset: int, size: int) -> int:
    return int.from_bytes(frame[offset:offset + size], "big")


@pytest.mark.parametrize("direction,vlan,l4", [("ul", False, "udp"), ("ul", True, "udp"), ("dl", False, "udp"),
                                                ("ul", False, "tcp"), ("dl", True, "tcp")])
def test_program_writes_what_every_flow_of_the_profile_differs_by(worker, direction, vlan, l4):
    """Read TRex's encoding with TRex's documented semantics (a write puts ``value + add_value`` big-endian
    into ``size`` bytes at ``pkt_offset``; checksum fixes rewrite only checksums): for flow i every
    written field of ``profile.packet(i)`` holds i + add_value, and every byte in which packet(i)
    differs from packet(0) is written or a fixed checksum (uplink: from the GTP header on; the outer
    source stays flow 0's SGW by design)."""
    flows = 12
    profile = PgwuTraffic(direction=direction, flows=flows, plan=SessionPlan(count=flows, tagged=vlan), vlan=vlan,
                          inner_l4=l4, frame_size=128)
    stream = data_json(worker, profile)
    sent = base64.b64decode(stream["packet"]["binary"])
    assert sent == profile.packet(0)
    var = {i["name"]: i for i in instructions(stream) if i["type"] == "flow_var"}
    writes = [(i["pkt_offset"], var[i["name"]]["size"] if i["type"] == "write_flow_var" else i["pkt_cast_size"],
               i["add_value"]) for i in instructions(stream) if i["type"].startswith("write")]
    fixes = [i for i in instructions(stream) if i["type"].startswith("fix")]
    csum_bytes: set[int] = set()
    for fix in fixes:
        l3 = fix.get("pkt_offset", fix.get("l2_len"))
        csum_bytes |= {l3 + 10, l3 + 11}
        if fix["type"] == "fix_checksum_hw":
            at = fix["l2_len"] + fix["l3_len"] + (16 if fix["l4_type"] == L4_TYPE_TCP else 6)
            csum_bytes |= {at, at + 1}
    start = profile.offsets()["gtp"] if direction == "ul" else 0
    written = {b for off, size, _ in writes for b in range(off, off + size)}
    for i in range(flows):
        frame = profile.packet(i)
        for off, size, add in writes:
            assert _field(frame, off, size) == (i + add) % (1 << 8 * size), f"flow {i} at {off}"
        differs = {b for b in range(start, len(frame)) if frame[b] != sent[b]}
        assert differs <= written | csum_bytes, f"flow {i}: bytes {sorted(differs - written - csum_bytes)}"


def test_tcp_checksum_fixed_in_hardware_with_inner_offsets(worker):
    profile = PgwuTraffic(direction="ul", flows=4, plan=SessionPlan(count=4), inner_l4="tcp", frame_size=128)
    fixes = [i for i in instructions(data_json(worker, profile)) if i["type"].startswith("fix")]
    # one instruction: TRex's hardware fix-up does the IPv4 header and TCP (inner IPv4 at 50, TCP at 70)
    assert fixes == [{"type": "fix_checksum_hw", "l2_len": 50, "l3_len": 20, "l4_type": L4_TYPE_TCP}]


def test_udp_checksum_is_fixed_as_udp_at_l4_plus_6(worker):
    """A UDP checksum (at l4 + 6, not TCP's l4 + 16) gets TRex's UDP hardware fix-up."""
    profile = PgwuTraffic(direction="dl", flows=4, plan=SessionPlan(count=4))
    frame = profile.packet(0)
    ip, l4 = 14, 34
    assert frame[ip + 9] == 17
    engine = FieldEngine((FlowVar("inc", 0, 3),), (FieldWrite("udp.sport", l4, 2, 0, 7, 0b11),), (ip + 10, l4 + 6),
                         0, 0, l3_offset=ip, l4_offset=l4)
    program = vm_instructions(engine, frame)
    assert program[-1] == {"type": "STLVmFixChecksumHw", "args": {"l3_offset": ip, "l4_offset": l4, "l4_type": "udp"}}
    from perfkit.trex.client import build_streams_json
    spec = {"name": "u", "frame": base64.b64encode(frame).decode(), "mode": {"type": "continuous", "pps": 10.0},
            "vm": program}
    (stream,) = build_streams_json([spec], worker=worker)
    assert instructions(stream)[-1] == {"type": "fix_checksum_hw", "l2_len": ip, "l3_len": l4 - ip,
                                        "l4_type": L4_TYPE_UDP}


def test_unknown_checksum_offset_is_a_config_error():
    profile = PgwuTraffic(direction="dl", flows=2, plan=SessionPlan(count=2))
    engine = profile.field_engine()
    bad = FieldEngine(engine.vars, engine.writes, (99,), 0, 0, l3_offset=14, l4_offset=34)
    with pytest.raises(ConfigError, match=r"checksum offset: 99 is not allowed; allowed: the IPv4 header checksum "
                                          r"\(24\) or the L4 checksum \(40\)"):
        vm_instructions(bad, profile.packet(0))


def test_single_flow_has_no_program_and_frame_is_padded_to_size(worker):
    profile = PgwuTraffic(direction="ul", frame_size=64)
    stream = data_json(worker, profile)
    assert instructions(stream) == []
    assert len(base64.b64decode(stream["packet"]["binary"])) == profile.wire_frame_size - 4 == 96


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


def test_streams_modes_latency_split_and_mac_flags(worker):
    profile = PgwuTraffic(direction="dl", flows=4, plan=SessionPlan(count=4))
    data, lat = streams_json(build_streams(profile, 1e6, latency_pg_id=7), worker)
    assert data["mode"] == {"type": "continuous", "rate": {"type": "pps", "value": 999_000.0}}
    assert lat["mode"] == {"type": "continuous", "rate": {"type": "pps", "value": 1000.0}}
    assert data["flow_stats"] == {"enabled": False}
    assert lat["flow_stats"] == {"enabled": True, "stream_id": 7, "rule_type": "latency", "vxlan": False,
                                 "ieee_1588": False}
    assert lat["vm"]["instructions"] == [] and base64.b64decode(lat["packet"]["binary"]) == profile.packet(0)
    assert data["flags"] == lat["flags"] == FLAGS_PACKET_MACS
    (burst,) = streams_json(build_streams(profile, 1e5, 12345, packet_macs=False), worker)
    assert burst["mode"] == {"type": "single_burst", "total_pkts": 12345, "rate": {"type": "pps", "value": 1e5}}
    assert burst["flags"] == FLAGS_PORT_MACS


def test_trex_refuses_what_it_refuses(worker):
    """TRex's own checks run on perfkit's specs: a bad instruction is TRex's error, one line."""
    frame = base64.b64encode(bytes(60)).decode()
    bad = {"name": "x", "frame": frame, "mode": {"type": "continuous", "pps": 1.0},
           "vm": [{"type": "STLVmFlowVar", "args": {"name": "v", "size": 3}}]}
    with pytest.raises(PerfkitError) as err:
        worker.call("build_streams", streams=[bad])
    assert "\n" not in str(err.value) and "size" in str(err.value)


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


# -- a trial: TRexGenerator -> worker -> TRex's STLClient -> FakeTRexRpcServer ----------------------
def dut_for(profile: PgwuTraffic):
    return lambda frame: emit(frame, profile.config, profile.plan).out


def generator(server: FakeTRexRpcServer, scenario: Scenario, **options) -> TRexGenerator:
    return TRexGenerator(scenario, server="127.0.0.1", sync_port=server.sync_port, async_port=server.async_port,
                         **options)


def fake_server(scenario: Scenario, **kw) -> FakeTRexRpcServer:
    return FakeTRexRpcServer(dut=dut_for(scenario.traffic()), gateways=GATEWAYS, **kw)


def test_trial_uplink_counts_what_the_server_reports_and_sends_the_built_streams(worker):
    sc = Scenario(frame_size=64, flows=100, params={"direction": "ul"})
    with fake_server(sc, capacity_pps=800_000) as srv:
        with generator(srv, sc) as gen:
            r = gen.measure(1e6, 2.0)
        names = srv.method_names
        (start,) = srv.calls("start_traffic")
        assert start["port_id"] == 0 and start["duration"] == 2.0 and start["force"] is True
        assert start["mul"]["type"] == "raw" and start["mul"]["value"] == 1.0
        assert {p["port_id"] for p in srv.calls("acquire")} == {0, 1}
        assert names.index("acquire") < names.index("add_stream") < names.index("start_traffic")
        assert names[-2:] == ["release", "release"]  # close() released both ports
        (sent,) = srv.streams_of(0)
        assert srv.streams_of(1) == []
    assert sent.pop("next_stream_id") == -1  # the client adds the (absent) chain when it sends
    assert sent == streams_json(build_streams(sc.traffic(), 1e6), worker)[0]
    assert (r.generator, r.intended_packets, r.tx_packets, r.rx_packets) == ("trex", 2_000_000, 2_000_000, 1_600_000)
    assert r.loss_ratio == pytest.approx(0.2)
    assert (r.wire_frame_size, r.rx_frame_size) == (100, 64)  # decapsulated: 36 bytes less, FCS counted
    assert "trex" not in sys.modules and "lbr_trex_client" not in sys.modules  # TRex stayed in the worker


def test_downlink_uses_port_1_and_a_single_burst():
    sc = Scenario(frame_size=128, params={"direction": "dl"})
    with fake_server(sc) as srv:
        with generator(srv, sc) as gen:
            r = gen.measure(1e5, 1.0, packets=1000)
        (start,) = srv.calls("start_traffic")
        (stream,) = srv.streams_of(1)
    assert start["port_id"] == 1 and start["duration"] == -1
    assert stream["mode"] == {"type": "single_burst", "total_pkts": 1000, "rate": {"type": "pps", "value": 1e5}}
    assert (r.tx_packets, r.rx_packets, r.rx_frame_size) == (1000, 1000, 128 + 36)


def test_l3_mode_resolves_the_gateways_by_arp_and_sends_port_macs():
    sc = Scenario()
    with fake_server(sc) as srv:
        with generator(srv, sc, l3={0: ("198.18.0.2", "198.18.0.1"), 1: ("198.19.0.2", "198.19.0.1")}) as gen:
            gen.measure(1e4, 1.0)
        resolved = {p["port_id"]: p.get("resolved_mac") for p in srv.calls("set_l3") if p.get("resolved_mac")}
        (stream,) = srv.streams_of(0)
    # TRex's ARP service sent requests (push_pkts) and read the replies from a capture, in service mode
    assert resolved == {0: GATEWAYS["198.18.0.1"], 1: GATEWAYS["198.19.0.1"]}
    assert service_mode_around(srv, "set_l3") and service_mode_around(srv, "push_pkts")
    assert stream["flags"] == FLAGS_PORT_MACS


def service_mode_around(srv: FakeTRexRpcServer, method: str) -> bool:
    """Every ``method`` call came while its port was in service mode, and service mode ended before
    the streams were added."""
    mode: dict[int, bool] = {}
    seen = False
    for name, params in srv.requests:
        if name == "service":
            mode[params["port_id"]] = params["enabled"]
        elif name == method:
            seen = True
            if not mode.get(params["port_id"]):
                return False
        elif name == "add_stream" and any(mode.values()):
            return False
    return seen


def test_l3_mode_without_an_answer_is_one_line():
    sc = Scenario()
    with fake_server(sc) as srv:
        with generator(srv, sc, l3={0: ("198.18.0.2", "198.18.0.99")}) as gen:
            with pytest.raises(PerfkitError, match=r"^TRex: Could not resolve following ports: \[0\]$"):
                gen.measure(1e4, 1.0)


def test_l2_mode_sets_destination_macs():
    sc = Scenario()
    with fake_server(sc) as srv:
        with generator(srv, sc, l2={0: "02:00:00:00:0c:01"}) as gen:
            gen.measure(1e4, 1.0)
        assert [(p["port_id"], p["dst_mac"]) for p in srv.calls("set_l2")] == [(0, "02:00:00:00:0c:01")]
        assert service_mode_around(srv, "set_l2")  # TRex refuses L2 mode outside service mode
        assert srv.streams_of(0)[0]["flags"] == FLAGS_PORT_MACS


def test_latency_stream_gives_percentiles_in_ns():
    sc = Scenario(flows=10, params={"direction": "ul"})
    with fake_server(sc) as srv:
        with generator(srv, sc, latency_pg_id=5) as gen:
            r = gen.measure(1e6, 1.0)
        data, lat = srv.streams_of(0)
    assert lat["flow_stats"]["stream_id"] == 5 and lat["flow_stats"]["rule_type"] == "latency"
    assert data["mode"]["rate"]["value"] + lat["mode"]["rate"]["value"] == 1e6
    assert r.tx_packets == 1_000_000  # data 999 000 + latency 1 000: the rate asked for, no more
    assert r.latency_ns["p50"] == pytest.approx(20_000) and r.latency_ns["max"] == pytest.approx(150_000)


@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_capture_is_saved_and_checked_with_the_model(tmp_path, direction):
    sc = Scenario(flows=20, params={"direction": direction})
    with fake_server(sc) as srv:
        with generator(srv, sc, capture=tmp_path / "rx.pcap", capture_count=8) as gen:
            r = gen.measure(1e5, 1.0)
        (cap,) = [p for p in srv.calls("capture") if p["command"] == "start" and p["filter"] == "ip or (vlan and ip)"]
        names = srv.method_names
    assert r.mismatched_packets == 0
    assert len(rdpcap(str(tmp_path / "rx.pcap"))) == 8
    assert cap["rx"] == [1 if direction == "ul" else 0] and cap["limit"] == 8
    assert names.index("start_traffic") < len(names) - 1 - names[::-1].index("capture")


def test_capture_mismatch_is_counted_and_noted(tmp_path):
    sc = Scenario(flows=4, params={"direction": "ul"})
    with fake_server(sc, corrupt_capture=True) as srv:
        with generator(srv, sc, capture=tmp_path / "rx.pcap", capture_count=4) as gen:
            r = gen.measure(1e4, 1.0)
    assert r.mismatched_packets == 1
    assert any("1 of 4 captured packets are not what the PGW-U should emit" in n for n in r.notes)


def test_server_error_is_one_line_and_close_still_releases_the_ports():
    sc = Scenario()
    with fake_server(sc, fail_on="start_traffic") as srv:
        gen = generator(srv, sc)
        with pytest.raises(PerfkitError) as err:
            with gen:
                gen.measure(1e4, 1.0)
        assert str(err.value).startswith("TRex: ") and "start_traffic failed" in str(err.value)
        assert "\n" not in str(err.value)
        assert srv.method_names[-2:] == ["release", "release"]
    gen.close()  # idempotent
    with pytest.raises(PerfkitError, match="closed"):
        gen.measure(1e4, 1.0)


def test_no_server_listening_is_one_line():
    sc = Scenario()
    with FakeTRexRpcServer() as srv:
        port = srv.sync_port
    with pytest.raises(PerfkitError) as err:
        TRexGenerator(sc, server="127.0.0.1", sync_port=port, async_port=port + 1)
    assert str(err.value).startswith("TRex: ") and "\n" not in str(err.value)


def test_create_by_name():
    sc = Scenario(params={"direction": "dl"})
    with fake_server(sc) as srv:
        with create("trex", sc, server="127.0.0.1", sync_port=srv.sync_port, async_port=srv.async_port) as gen:
            assert isinstance(gen, TRexGenerator) and gen.name == "trex"
            assert gen.measure(1e3, 1.0).generator == "trex"


# -- the worker process ------------------------------------------------------------------------------
def test_worker_dies_with_perfkit_and_releases_the_ports(tmp_path):
    """SIGKILL of the process that runs TRexGenerator: its worker gets SIGTERM (PR_SET_PDEATHSIG),
    disconnects (the server sees both ports released) and exits."""
    sc_code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from perfkit.generators.trex import TRexGenerator
        from perfkit.scenario import Scenario
        gen = TRexGenerator(Scenario(), server="127.0.0.1", sync_port=int(sys.argv[1]), async_port=int(sys.argv[2]))
        gen._client("reset", ports=gen.ports)
        print(gen._worker.proc.pid, flush=True)
        time.sleep(600)
    """)
    with FakeTRexRpcServer() as srv:
        proc = subprocess.Popen([sys.executable, "-c", sc_code, str(srv.sync_port), str(srv.async_port)],
                                stdout=subprocess.PIPE, text=True)
        worker_pid = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while _alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker_pid)
        assert [p["port_id"] for p in srv.calls("release")] == [0, 1]


@pytest.mark.slow  # waits out the bounded disconnect; the bound itself: test_worker_exit_gives_up_...
def test_worker_ends_when_perfkit_and_the_server_are_gone_mid_trial():
    """SIGKILL of perfkit while TRex sends (with a latency stream, whose RX filters TRex's disconnect
    waits on) and the server gone too: the worker gives up disconnecting after a bounded time and exits."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from perfkit.generators.trex import TRexGenerator
        from perfkit.scenario import Scenario
        gen = TRexGenerator(Scenario(), server="127.0.0.1", sync_port=int(sys.argv[1]), async_port=int(sys.argv[2]),
                            latency_pg_id=1)
        print(gen._worker.proc.pid, flush=True)
        gen.measure(1e4, 600.0)
    """)
    srv = FakeTRexRpcServer(tx_seconds=600).start()
    try:
        proc = subprocess.Popen([sys.executable, "-c", code, str(srv.sync_port), str(srv.async_port)],
                                stdout=subprocess.PIPE, text=True)
        worker_pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 60
        while "start_traffic" not in srv.method_names and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "start_traffic" in srv.method_names
    finally:
        srv.stop()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while _alive(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker_pid)


def test_worker_exit_gives_up_a_disconnect_that_hangs(capsys):
    """TRex's disconnect stops traffic and then polls for the server to say it stopped; with events lost
    it polls forever (a worker left behind doing so was seen here). The worker's exit bounds it."""
    from perfkit.trex import worker as trex_worker

    def hang() -> None:
        while True:
            time.sleep(0.01)

    trex_worker.bounded(hang, 1)
    assert "disconnect: TimeoutError: gave up after 1 s" in capsys.readouterr().err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_worker_that_died_is_a_one_line_error(worker):
    with TRexWorker() as w:
        w.proc.kill()
        w.proc.wait()
        with pytest.raises(WorkerError, match="the TRex worker"):
            w.call("hello", timeout=10)


def test_worker_out_of_step_is_stopped_and_replaced(tmp_path, monkeypatch):
    """A call that gets no answer in time stops the worker (its late answer would be taken for the next
    one's); the shared worker is then started afresh."""
    # A worker inside a profile's get_streams does not end on SIGTERM (TRex's load_py takes the
    # SystemExit of its handler for the profile's own exit): only the SIGKILL after the grace period
    # does. 2 s of grace here instead of CLOSE_TIMEOUT's 15.
    monkeypatch.setattr(trex_client, "CLOSE_TIMEOUT", 2.0)
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nclass P:\n    def get_streams(self, **kw):\n        time.sleep(60)\n"
                    "def register():\n    return P()\n")
    w = trex_client.shared_worker()
    with pytest.raises(WorkerError, match="no answer from the TRex worker in 1 s; it was stopped"):
        w.call("load_profile", timeout=1, path=str(slow))
    assert not w.alive
    assert trex_client.shared_worker() is not w and trex_client.shared_worker().alive


def test_worker_started_by_a_thread_outlives_the_thread():
    """PR_SET_PDEATHSIG follows the forking thread, not the process: only main-thread workers use it."""
    import threading

    box: list[TRexWorker] = []
    t = threading.Thread(target=lambda: box.append(TRexWorker()))
    t.start()
    t.join()
    with box[0] as w:
        assert w.call("hello", timeout=30)["wire_version"] == 1


def test_missing_trex_environment_says_make_setup(monkeypatch, tmp_path):
    monkeypatch.delenv(trex_client.ENV_PYTHON, raising=False)
    monkeypatch.setattr(trex_client, "DEFAULT_VENV", tmp_path / "no-venv")
    with pytest.raises(PerfkitError, match=r"TRex client library is not installed: .*run `make setup`"):
        trex_client.trex_python()
    monkeypatch.setenv(trex_client.ENV_PYTHON, str(tmp_path / "python9"))
    with pytest.raises(PerfkitError, match="PERFKIT_TREX_PYTHON=.*python9 is not an executable"):
        TRexGenerator(Scenario(), server="127.0.0.1")


def test_trex_home_installation_is_used_instead_of_the_pypi_client(tmp_path):
    """A lab's TRex tree: $TREX_HOME/automation/trex_control_plane/interactive (here: the PyPI copy's)."""
    worker_python = trex_client.trex_python()
    site = Path(subprocess.check_output([str(worker_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    home = tmp_path / "trex"
    (home / "automation" / "trex_control_plane").mkdir(parents=True)
    (home / "automation" / "trex_control_plane" / "interactive").symlink_to(site / "lbr_trex_client" / "interactive")
    with TRexWorker(trex_home=home) as w:
        assert w.info["source"] == str(home / "automation" / "trex_control_plane" / "interactive")
        assert load_profile(ROOT / "tests" / "data" / "trex_min_profile.py", ["--pps", "7"], worker=w)[0]["mode"] == \
            {"type": "continuous", "rate": {"type": "pps", "value": 7}}
    with pytest.raises(ConfigError, match="TREX_HOME: .*nothing.* is not allowed; allowed: a TRex installation"):
        TRexWorker(trex_home=tmp_path / "nothing")


# -- load_profile: TRex's STLProfile.load_py, as its console calls it -------------------------------
PROFILES = {
    "kw.py": """
        from trex.stl.api import *
        class P:
            def get_streams(self, direction=0, port_id=0, flows=1, tunables=None, **kwargs):
                return [STLStream(packet=STLPktBuilder(pkt_buffer=bytes(60)), mode=STLTXCont(pps=flows + 10 * direction))]
        def register():
            return P()
        """,
    "argp.py": """
        import argparse
        from trex.stl.api import *
        class P:
            def get_streams(self, tunables, **kwargs):
                p = argparse.ArgumentParser(prog="argp.py")
                p.add_argument("--flows", type=int, default=1)
                print("profiles may print; the worker's answers stay clean")
                a = p.parse_args(tunables)
                return [STLStream(packet=STLPktBuilder(pkt_buffer=bytes(60)), mode=STLTXCont(pps=a.flows))]
        def register():
            return P()
        """,
    "syntax.py": "def register(:\n",
    "boom.py": """
        from trex.stl.api import *
        class P:
            def get_streams(self, direction=0, **kwargs):
                return [STLStream(packet=STLPktBuilder(pkt_buffer=bytes(60)), mode=STLTXCont(pps=1 / 0))]
        def register():
            return P()
        """,
}


@pytest.fixture()
def profiles(tmp_path) -> Path:
    for name, text in PROFILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def rates(streams: list[dict]) -> list[float]:
    return [s["mode"]["rate"]["value"] for s in streams]


def test_load_profile_tunables_as_the_console_passes_them(profiles, worker):
    assert rates(load_profile(profiles / "kw.py", ["flows=9"], worker=worker)) == [9]  # -t flows=9
    assert rates(load_profile(profiles / "kw.py", {"flows": 5}, port_id=1, port_parity=1, worker=worker)) == [15]
    assert rates(load_profile(profiles / "argp.py", ["--flows", "7"], worker=worker)) == [7]  # -t --flows 7
    assert rates(load_profile(profiles / "argp.py", worker=worker)) == [1]


def test_load_profile_shared_worker(profiles):
    """The module-level call spawns one worker and keeps it for the next load."""
    assert rates(load_profile(str(profiles / "argp.py"), ["--flows", "3"])) == [3]
    first = trex_client.shared_worker()
    load_profile(profiles / "argp.py")
    assert trex_client.shared_worker() is first and first.alive


@pytest.mark.parametrize("name,tunables,error,message", [
    ("nope.py", [], ConfigError, r"trex profile: '.*nope.py' is not allowed; allowed: an existing TRex STL profile"),
    ("syntax.py", [], PerfkitError, r"TRex profile .*syntax.py: SyntaxError: invalid syntax \(syntax.py, line 1\)"),
    ("boom.py", [], PerfkitError, r"TRex profile .*boom.py: ZeroDivisionError: division by zero \(at boom.py:5\)"),
    ("argp.py", ["--nope", "1"], ConfigError,
     r"tunables: \['--nope', '1'\] is not allowed; allowed: what argp.py accepts: .*unrecognized arguments: --nope 1"),
    ("kw.py", ["flowz=9"], None, None),
])
def test_load_profile_errors_are_one_line(profiles, worker, name, tunables, error, message):
    if error is None:  # kw.py takes **kwargs: TRex passes unknown keywords on, as its console does
        assert rates(load_profile(profiles / name, tunables, worker=worker)) == [1]
        return
    with pytest.raises(error, match=message) as err:
        load_profile(profiles / name, tunables, worker=worker)
    assert "\n" not in str(err.value)


def test_load_profile_bad_arguments(worker):
    for kwargs, field in (({"port_id": -1}, "port_id"), ({"port_parity": 2}, "port_parity"), ({"tunables": "a=1"}, "tunables")):
        with pytest.raises(ConfigError) as err:
            load_profile(ROOT / "tests" / "data" / "trex_min_profile.py", worker=worker, **kwargs)
        assert err.value.field == field


# -- options and errors ---------------------------------------------------------------------------
def test_server_from_environment_or_error(monkeypatch):
    monkeypatch.delenv(ENV_SERVER, raising=False)
    with pytest.raises(ConfigError, match=f"server: None is not allowed.*{ENV_SERVER}"):
        TRexGenerator(Scenario())
    sc = Scenario()
    with fake_server(sc) as srv:
        monkeypatch.setenv(ENV_SERVER, "127.0.0.1")
        with TRexGenerator(sc, sync_port=srv.sync_port, async_port=srv.async_port) as gen:
            assert gen.server == "127.0.0.1"
        assert srv.method_names[0] == "api_sync_v2"


@pytest.mark.parametrize("options,field", [({"tx_port": -1}, "tx_port"), ({"rx_port": "1"}, "rx_port"),
                                           ({"flow_op": "zigzag"}, "flow_op"), ({"latency_pg_id": -3}, "latency_pg_id"),
                                           ({"sync_port": 0}, "sync_port"), ({"async_port": "4500"}, "async_port"),
                                           ({"l2": {0: "02:00:00:00:00:01"}, "l3": {0: ("198.18.0.2", "198.18.0.1")}},
                                            "l2/l3 ports")])
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError) as err:
        TRexGenerator(Scenario(flows=2), server="127.0.0.1", **options)
    assert err.value.field == field


def test_bad_trial_arguments():
    sc = Scenario()
    with fake_server(sc) as srv:
        with generator(srv, sc) as gen:
            for args, field in (((0, 1.0), "rate"), ((1e3, -1.0), "duration"), ((1e3, 1.0, 0), "packets")):
                with pytest.raises(ConfigError) as err:
                    gen.measure(*args)
                assert err.value.field == field
        assert "start_traffic" not in srv.method_names


def test_json_keys_back_to_numbers():
    assert trex_client.int_keys(json.loads(json.dumps({0: {"x": 1}, "latency": {5: {"histogram": {10: 2}}}}))) == \
        {0: {"x": 1}, "latency": {5: {"histogram": {10: 2}}}}
