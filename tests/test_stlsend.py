"""TRex STL profiles as TRex sends them: the port's MAC addresses by the streams' override flags,
padding to 60 bytes, start delays (ISG), single and multi-bursts; TRex's own example profiles
(``tests/data/trex_stl``) unchanged, loaded by TRex's library and run on the local testbed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from perfkit.scenario import Scenario
from perfkit.stl import macs as stlmacs
from perfkit.stl import profile as stlprofile
from perfkit.testbed import stlgen
from tests.conftest import ROOT
from tests.script_forks import ScriptForks
from tests.test_stlprofile import write_profile

EXAMPLES = ROOT / "tests" / "data" / "trex_stl"
IMIX, MPLS_BURST = EXAMPLES / "imix.py", EXAMPLES / "udp_1pkt_mpls_vm.py"
PKT_SRC, PKT_DST = "02:00:00:00:aa:01", "02:00:00:00:aa:02"
PORT = stlmacs.PortMacs(bytes.fromhex("0200000000b1"), bytes.fromhex("0200000000b2"), "test")
UDP = 'Ether(src="{s}", dst="{d}")/IP(src="198.18.0.1", dst="198.19.0.1")/UDP(sport=1025, dport=12)/(b"x" * 30)'


@pytest.fixture(scope="module")
def cli(perfkit_module: ScriptForks) -> Callable:
    return lambda *args: perfkit_module.run(list(args), cwd=ROOT)


def one_stream(tmp_path: Path, mode: str = "STLTXCont(pps=10)", base: str | None = None, extra: str = "") -> Path:
    base = base or UDP.format(s=PKT_SRC, d=PKT_DST)
    return write_profile(tmp_path, "", base=base, streams=f"[STLStream(packet=STLPktBuilder(pkt=base), mode={mode}{extra})]")


# -- MAC addresses -----------------------------------------------------------------------------------
@pytest.mark.parametrize("src_by_pkt", [False, True])
@pytest.mark.parametrize("dst_mode", [0, 1, 2])
def test_mac_override_by_flags(tmp_path, src_by_pkt, dst_mode):
    """Each combination of mac_src_override_by_pkt and mac_dst_override_mode: TRex's client encodes
    it in the JSON's flags (bit 0, bits 1-2), and the frame carries the packet's or the port's MACs
    as those bits say."""
    path = one_stream(tmp_path, extra=f", mac_src_override_by_pkt={src_by_pkt}, mac_dst_override_mode={dst_mode}")
    st = stlprofile.load(path, macs=PORT).streams[0]
    assert st.flags & 0x7 == int(src_by_pkt) | dst_mode << 1
    src, dst = st.frame[6:12], st.frame[0:6]
    assert src == (bytes.fromhex(PKT_SRC.replace(":", "")) if src_by_pkt else PORT.src)
    assert dst == (bytes.fromhex(PKT_DST.replace(":", "")) if dst_mode == 1 else PORT.dst)


def test_default_flags_follow_the_packet(tmp_path):
    """Without the arguments, TRex's client keeps MACs the packet sets and takes the port's otherwise."""
    own = stlprofile.load(one_stream(tmp_path), macs=PORT).streams[0]
    assert own.frame[:12] == bytes.fromhex((PKT_DST + PKT_SRC).replace(":", ""))
    plain = 'Ether()/IP(src="198.18.0.1", dst="198.19.0.1")/UDP()/(b"x" * 30)'
    st = stlprofile.load(one_stream(tmp_path, base=plain), macs=PORT).streams[0]
    assert st.flags & 0x7 == 0 and st.frame[:12] == PORT.dst + PORT.src


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_show_port_macs(tmp_path, cli):
    """trex-profile show: the testbed's MACs by default, --port-mac, --trex-cfg; bad ones exit 2."""
    path = one_stream(tmp_path, base='Ether()/IP(src="198.18.0.1", dst="198.19.0.1")/UDP()/(b"x" * 30)')
    cfg = tmp_path / "trex_cfg.yaml"
    cfg.write_text("- port_limit: 2\n  version: 2\n  interfaces: ['03:00.0', '03:00.1']\n  port_info:\n"
                   "    - {src_mac: '02:00:00:00:0c:01', dest_mac: '02:00:00:00:0c:02'}\n"
                   "    - {src_mac: '02:00:00:00:0c:03', dest_mac: '02:00:00:00:0c:04'}\n")
    cases = {(): "02000000010102000000010208", ("--port", "1"): "02000000020102000000020208",
             ("--port-mac", "02:00:00:00:0d:01,02:00:00:00:0d:02"): "02000000 0d02 02000000 0d01 08",
             ("--trex-cfg", str(cfg)): "02000000 0c02 02000000 0c01 08",
             ("--trex-cfg", str(cfg), "--port", "1"): "02000000 0c04 02000000 0c03 08"}
    for args, head in cases.items():
        r = cli("trex-profile", "show", str(path), "--count", "2", "--no-signature", "--json", *args)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert all(f.startswith(head.replace(" ", "")) for f in d["frames"]), (args, d["frames"])
    bad = [("--port-mac", "02:00:00:00:0d"), ("--trex-cfg", str(tmp_path / "none.yaml")),
           ("--port-mac", "02:00:00:00:0d:01,zz")]
    cfg2 = tmp_path / "nodest.yaml"
    cfg2.write_text("- port_info:\n    - {src_mac: '02:00:00:00:0c:01'}\n")
    bad.append(("--trex-cfg", str(cfg2)))
    for args in bad:
        r = cli("trex-profile", "show", str(path), *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert args[0] in r.stderr and "allowed" in r.stderr, r.stderr


# -- padding -----------------------------------------------------------------------------------------
def test_short_tcp_syn_padded_to_60(tmp_path, cli):
    """A 54-byte TCP SYN goes out as 60 bytes (64 with FCS), padded with zeros, as TRex sends it."""
    base = 'Ether()/IP(src="198.18.0.1", dst="198.19.0.1")/TCP(sport=1025, dport=80, flags="S")'
    path = one_stream(tmp_path, base=base)
    r = cli("trex-profile", "show", str(path), "--count", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    frames = [bytes.fromhex(f) for f in d["frames"]]
    assert {len(f) for f in frames} == {60} and d["streams"][0]["frame_size"] == 64
    assert all(f[54:] == bytes(6) and f[47] == 0x02 for f in frames)  # padding zero, SYN kept


# -- modes -------------------------------------------------------------------------------------------
def test_examples_load_as_trex_sends_them():
    """TRex's imix.py: three continuous streams at 28:16:4 with ISGs 0, 0.1, 0.2 us; the MPLS
    example: one single burst of 100."""
    imix = stlprofile.load(IMIX, macs=stlmacs.testbed_macs(0))
    assert [s.isg for s in imix.streams] == [0, 0.1, 0.2] and [s.count for s in imix.streams] == [0, 0, 0]
    assert [len(s.frame) for s in imix.streams] == [60, 590, 1514]
    assert stlgen.for_testbed(imix).weights == (7, 4, 1)
    burst = stlprofile.load(MPLS_BURST).streams[0]
    assert (burst.count, burst.burst) == (100, 0)


def test_show_stops_at_the_burst(cli):
    """trex-profile show of a 100-packet burst: its 100 frames, whatever --count asks beyond."""
    r = cli("trex-profile", "show", str(MPLS_BURST), "--count", "150", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["frames"]) == 100 and d["streams"][0]["mode"].startswith("100 packets")
    labels = [int(f[36:42], 16) >> 4 for f in d["frames"]]  # the inner label, walked by the VM
    assert labels == list(range(1, 101))


def test_plan_counts(tmp_path):
    """What a send plans per stream: a continuous stream its share of rate x (duration - ISG), a
    burst at most its count, a multi-burst the bursts that fit with their gaps."""
    streams = ("[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(pps=3), isg=100000),"
               " STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXSingleBurst(pps=1, total_pkts=50)),"
               " STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXMultiBurst(pps=1, pkts_per_burst=10,"
               " ibg=250000, count=4))]")
    c = stlgen.for_testbed(stlprofile.load(write_profile(tmp_path, "", streams=streams)))
    assert c.weights == (3, 1, 1) and c.timed and not c.finite
    # 500 pps: 300, 100, 100 per stream; 1 s: 300 x 0.9, min(50, 100), bursts of 0.1 s + 0.25 s gaps
    assert c.plan(500, 1.0, None) == [270, 50, 30]
    assert c.plan(500, 0.55, None) == [135, 50, 20]
    assert c.plan(None, 1.0, None) == [None, 50, 40]
    assert c.plan(500, 1.0, 1000) == [None, 50, 40]


# -- on the local testbed (XDP generator -> calibrated DUT -> sink) -----------------------------------
CALIB = Scenario("calib", frame_size=64, flows=1, params={"work_iterations": 0})


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_imix_example_on_the_testbed():
    """TRex's imix.py, unchanged, through the calibrated DUT: every frame of its three streams offered
    and received, at the rate asked."""
    from perfkit.generators import create

    with create("xdp", CALIB, trex_profile=str(IMIX)) as gen:
        # the duration's frames (a host stall may leave some unsent by then: counted, but not these)
        timed = gen.measure(12_000, 1.0)
        r = gen.measure(24_000, 1.0, packets=12_000)
    assert timed.intended_packets == 12_000 and timed.rx_packets <= timed.tx_packets <= 12_000, timed.to_dict()
    assert r.intended_packets == 12_000 and r.tx_packets == 12_000, r.to_dict()
    ring = r.dut_drops.get("rx_ring_full", 0) + r.tester_drops.get("rx_ring_full", 0)
    assert r.rx_packets + ring == 12_000, r.to_dict()
    assert r.tx_bytes == 12_000 // 48 * (28 * 64 + 16 * 594 + 4 * 1518), r.to_dict()
    assert any("imix.py" in n for n in r.notes)


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_single_burst_example_on_the_testbed():
    """TRex's udp_1pkt_mpls_vm.py, unchanged: its burst sends exactly 100 frames, at a rate and as fast
    as possible, however long the trial; the DUT passes MPLS frames to its kernel (counted)."""
    from perfkit.generators import create

    with create("xdp", CALIB, trex_profile=str(MPLS_BURST)) as gen:
        for rate in (10_000, None):
            r = gen.measure(rate, 1.0)
            assert r.intended_packets == 100 and r.tx_packets == 100, r.to_dict()
            assert r.rx_packets + sum(r.dut_drops.values()) == 100, r.to_dict()


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_multi_burst_and_isg_on_the_testbed(tmp_path):
    """A multi-burst (3 bursts of 50, 20 ms apart) after a 30 ms ISG beside a continuous stream: the
    burst's 150 frames exactly, the continuous stream its share for the duration, all received."""
    from perfkit.generators import create
    from tests.test_stlprofile import IP_A, IP_B

    base = f'Ether()/IP(src="{IP_A}", dst="{IP_B}")/UDP(sport=1025, dport=12)/(b"x" * 30)'
    streams = ("[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(pps=1)),"
               " STLStream(packet=STLPktBuilder(pkt=base), isg=30000,"
               " mode=STLTXMultiBurst(pps=1, pkts_per_burst=50, ibg=20000, count=3))]")
    path = write_profile(tmp_path, "", base=base, streams=streams)
    with create("xdp", CALIB, trex_profile=str(path)) as gen:
        # 10,000 pps each for 0.5 s: 5000 continuous; the bursts take 5 ms each + 20 ms gaps after a
        # 30 ms start, all in the first 85 ms (a host stall may leave continuous frames unsent by the end)
        timed = gen.measure(20_000, 0.5)
        timed_sent = [sum(s.mix_sent[i] for s in gen.gen._states()) for i in (0, 1)]
        r = gen.measure(20_000, 0.5, packets=5150)
        sent = [sum(s.mix_sent[i] for s in gen.gen._states()) for i in (0, 1)]
    assert timed.intended_packets == 5150 and timed_sent[1] == 150 and timed_sent[0] <= 5000, timed.to_dict()
    assert r.intended_packets == 5150 and r.tx_packets == 5150 and sent == [5000, 150], r.to_dict()
    ring = r.dut_drops.get("rx_ring_full", 0) + r.tester_drops.get("rx_ring_full", 0)
    assert r.rx_packets + ring == 5150, r.to_dict()
