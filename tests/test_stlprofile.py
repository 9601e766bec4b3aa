"""TRex STL profiles on perfkit's XDP generator: real TRex library (``STLProfile.load_py`` in its own
environment through ``perfkit.trex``), real generator program (BPF_PROG_TEST_RUN), real scapy.

TRex's simulator binary (bp-sim-64) does not ship with the PyPI client, so the frames are checked
against TRex's semantics as trex-core implements them (``src/stx/stl/trex_stl_stream_vm.h``:
``inc_mod``/``dec_mod``, ``StreamVmInstructionFlowMan::peek_prev``, ``StreamDPOpClientsLimit::run``,
``StreamDPOpPktWrMask::wr``; see ``perfkit/stl/vm.py``), with the expected values written out by hand
here, and against perfkit's Python model of them for whole frames.
"""
from __future__ import annotations

import ipaddress
import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from perfkit.scenario import Scenario
from perfkit.stl import profile as stlprofile
from perfkit.stl import vm as stlvm
from perfkit.stl import macs as stlmacs
from perfkit.testbed import stlgen
from tests.conftest import ROOT
from tests.script_forks import ScriptForks

IP_A, IP_B = "198.18.0.1", "198.19.0.1"
BASE = f'Ether()/IP(src="{IP_A}", dst="{IP_B}")/UDP(sport=1025, dport=12)/(b"x" * 40)'
# offsets in BASE: IP at 14 (tos 15, src 26, dst 30), UDP at 34 (sport 34, dport 36, csum 40), payload 42


def write_profile(tmp_path: Path, vm: str, base: str = BASE, streams: str | None = None, name: str = "p.py") -> Path:
    """A profile file with one continuous stream of ``base`` and the VM instructions ``vm``."""
    streams = streams or "[STLStream(packet=STLPktBuilder(pkt=base, vm=STLScVmRaw(vm)), mode=STLTXCont(pps=10))]"
    path = tmp_path / name
    path.write_text("\n".join([
        "from trex.stl.api import *",
        "class P:",
        "    def get_streams(self, direction=0, **kw):",
        f"        base = {base}",
        f"        vm = [{vm}]",
        f"        return {streams}",
        "def register():",
        "    return P()", ""]))
    return path


def load(path: Path, tunables: list[str] | None = None) -> stlprofile.StlStream:
    return stlprofile.load(path, tunables or []).streams[0]


def bpf_frames(stream: stlprofile.StlStream, n: int, signature: bool = False) -> list[bytes]:
    """The first ``n`` frames of the real generator program."""
    return stlgen.show(stlgen.compile_stream(stream, signature=signature), n)


def field(frames: list[bytes], off: int, size: int) -> list[int]:
    return [int.from_bytes(f[off:off + size], "big") for f in frames]


# -- TRex's semantics, value by value ---------------------------------------------------------------
def test_inc_starts_at_init_and_wraps_as_trex(tmp_path):
    """The first packet carries init_value (TRex stores peek_prev() = init - step); past max the rest
    of the step counts from min and the restart consumes one: 19 + 3 -> 11 in [10, 20]."""
    s = load(write_profile(tmp_path, 'STLVmFlowVar(name="a", min_value=10, max_value=20, size=2, op="inc", step=3),'
                                     'STLVmWrFlowVar(fv_name="a", pkt_offset="UDP.sport")'))
    want = [10, 13, 16, 19, 11, 14, 17, 20, 12, 15, 18, 10, 13]
    assert field(bpf_frames(s, len(want)), 34, 2) == want
    assert field(stlvm.frames(s, len(want)), 34, 2) == want


def test_init_value_and_dec_wrap(tmp_path):
    """An explicit init_value starts the walk there; dec past min restarts at max (minus the rest)."""
    s = load(write_profile(tmp_path, 'STLVmFlowVar(name="a", min_value=10, max_value=14, init_value=12, size=1, op="inc"),'
                                     'STLVmWrFlowVar(fv_name="a", pkt_offset="IP.tos"),'
                                     'STLVmFlowVar(name="b", min_value=5, max_value=9, size=4, op="dec", step=2),'
                                     'STLVmWrFlowVar(fv_name="b", pkt_offset="IP.dst")'))
    frames = bpf_frames(s, 8)
    assert field(frames, 15, 1) == [12, 13, 14, 10, 11, 12, 13, 14]
    assert field(frames, 30, 4) == [9, 7, 5, 8, 6, 9, 7, 5]  # default init for dec: max; 5 - 2 -> 8


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_sizes_wrap_at_their_width(tmp_path, size):
    """A variable of each size, its top values and the wrap, written big-endian with add_val
    truncated to the variable's size (StreamDPOpPktWr8..64)."""
    top = (1 << (8 * size)) - 1
    vm = (f'STLVmFlowVar(name="a", min_value={top - 2}, max_value={top}, size={size}, op="inc"),'
          f'STLVmWrFlowVar(fv_name="a", pkt_offset=50, add_val=1),'
          f'STLVmWrFlowVar(fv_name="a", pkt_offset=60, is_big=False)')
    frames = bpf_frames(load(write_profile(tmp_path, vm)), 5)
    assert field(frames, 50, size) == [(v + 1) & top for v in (top - 2, top - 1, top, top - 2, top - 1)]
    assert [int.from_bytes(f[60:60 + size], "little") for f in frames] == [top - 2, top - 1, top, top - 2, top - 1]


def test_offset_fixup_and_add_val(tmp_path):
    """offset_fixup moves the write (the JSON carries pkt_offset + offset_fixup); add_val is signed."""
    path = write_profile(tmp_path, 'STLVmFlowVar(name="a", min_value=100, max_value=102, size=2, op="inc"),'
                                   'STLVmWrFlowVar(fv_name="a", pkt_offset="UDP.sport", offset_fixup=8, add_val=-2)')
    s = load(path)
    assert s.program[1].offset == 42 and s.program[1].add == -2
    frames = bpf_frames(s, 4)
    assert field(frames, 42, 2) == [98, 99, 100, 98]
    assert field(frames, 34, 2) == [1025] * 4  # the field named by pkt_offset is left alone


def test_tuple_ip_moves_fastest_and_limit_restarts(tmp_path):
    """StreamDPOpClientsLimit: the IP advances every packet, the port when the IP wraps; after
    limit_flows packets the walk restarts at (ip_min, port_min)."""
    vm = ('STLVmTupleGen(name="t", ip_min="198.18.0.1", ip_max="198.18.0.3", port_min=1025, port_max=1026,'
          ' limit_flows={}),'
          'STLVmWrFlowVar(fv_name="t.ip", pkt_offset="IP.src"), STLVmWrFlowVar(fv_name="t.port", pkt_offset="UDP.sport")')
    base = int(ipaddress.IPv4Address("198.18.0.1"))
    unlimited = bpf_frames(load(write_profile(tmp_path, vm.format(0), name="u.py")), 8)
    assert [(i - base, p) for i, p in zip(field(unlimited, 26, 4), field(unlimited, 34, 2))] == \
        [(0, 1025), (1, 1025), (2, 1025), (0, 1026), (1, 1026), (2, 1026), (0, 1025), (1, 1025)]
    limited = bpf_frames(load(write_profile(tmp_path, vm.format(5), name="l.py")), 7)
    assert [(i - base, p) for i, p in zip(field(limited, 26, 4), field(limited, 34, 2))] == \
        [(0, 1025), (1, 1025), (2, 1025), (0, 1026), (1, 1026), (0, 1025), (1, 1025)]


def test_mask_write_with_shift(tmp_path):
    """write_mask_flow_var: ((var + add) << shift) & mask over the old bits outside the mask."""
    base = f'Ether()/IP(src="{IP_A}", dst="{IP_B}", tos=0x03)/UDP(sport=1025, dport=12)/(b"x" * 40)'
    vm = ('STLVmFlowVar(name="a", min_value=0, max_value=70, size=1, op="inc", step=7),'
          'STLVmWrMaskFlowVar(fv_name="a", pkt_offset="IP.tos", pkt_cast_size=1, mask=0xfc, shift=2, add_value=1),'
          'STLVmWrMaskFlowVar(fv_name="a", pkt_offset="UDP.dport", pkt_cast_size=2, mask=0x0ff0, shift=-1)')
    frames = bpf_frames(load(write_profile(tmp_path, vm, base=base)), 12)
    vals = [0, 7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 6]  # 70 + 7 wraps to 0 + (7 - 0 - 1)
    assert field(frames, 15, 1) == [(((v + 1) << 2) & 0xFC) | 0x03 for v in vals]
    assert field(frames, 36, 2) == [((v >> 1) & 0x0FF0) | (12 & ~0x0FF0) for v in vals]


# -- whole frames: the generator program against the model ------------------------------------------
WRITES = (
    'STLVmFlowVar(name="a", min_value=10, max_value=20, size=2, op="inc", step=3),'
    'STLVmWrFlowVar(fv_name="a", pkt_offset="UDP.sport", offset_fixup=20, add_val=-2),'
    'STLVmTupleGen(ip_min="198.18.0.1", ip_max="198.18.0.3", port_min=1025, port_max=1027, name="t", limit_flows=5),'
    'STLVmWrFlowVar(fv_name="t.ip", pkt_offset="IP.src"),'
    'STLVmWrFlowVar(fv_name="t.port", pkt_offset="UDP.dport"),'
    'STLVmFlowVar(name="b", min_value=5, max_value=9, size=1, op="dec", step=2),'
    'STLVmWrMaskFlowVar(fv_name="b", pkt_offset="IP.tos", pkt_cast_size=1, mask=0xfc, shift=2, add_value=1),'
    'STLVmFlowVar(name="c", min_value=2**64 - 5, max_value=2**64 - 1, size=8, op="dec", step=3),'
    'STLVmWrFlowVar(fv_name="c", pkt_offset=60),')
FIXES = ('STLVmFixIpv4(offset="IP"),'
         'STLVmFixChecksumHw(l3_offset="IP", l4_offset="UDP", l4_type=CTRexVmInsFixHwCs.L4_TYPE_UDP)')
DETERMINISTIC = WRITES + FIXES


def test_frames_byte_identical_to_trex_semantics(tmp_path):
    """Every byte of 64 frames, in order: the generator program equals the model of TRex's engine,
    and the checksums are right (scapy recomputes them)."""
    s = load(write_profile(tmp_path, DETERMINISTIC))
    got, want = bpf_frames(s, 64), stlvm.frames(s, 64)
    assert got == want
    assert len(set(got)) > 10
    for f in got:
        assert_checksums(f)


def assert_checksums(frame: bytes) -> None:
    """Scapy recomputes the IPv4, UDP, TCP and ICMPv6 checksums: they must equal the frame's."""
    p = Ether(frame)
    for layer in (IP, UDP, TCP, ICMPv6EchoRequest):
        if layer in p and (layer is not UDP or p[UDP].chksum):
            sent = p[layer].chksum if layer is not ICMPv6EchoRequest else p[layer].cksum
            q = p.copy()
            if layer is ICMPv6EchoRequest:
                del q[layer].cksum
            else:
                del q[layer].chksum
            again = Ether(bytes(q))
            assert sent == (again[layer].cksum if layer is ICMPv6EchoRequest else again[layer].chksum), layer.__name__


def test_write_into_total_length_refused(tmp_path):
    """A write into the IPv4 total length changes what the UDP checksum covers per packet: refused."""
    vm = ('STLVmFlowVar(name="r", min_value=60, max_value=70, size=2),STLVmWrFlowVar(fv_name="r", pkt_offset=16),'
          + FIXES)
    with pytest.raises(stlprofile.ConfigError, match="total length"):
        stlgen.compile_stream(load(write_profile(tmp_path, vm)))


def test_write_after_checksum_fix_refused(tmp_path):
    """TRex fixes a checksum where its instruction stands; a later write into what it covers is
    refused (the generator keeps checksums right after every write)."""
    vm = FIXES + ',STLVmFlowVar(name="r", min_value=0, max_value=9, size=4),STLVmWrFlowVar(fv_name="r", pkt_offset=70)'
    with pytest.raises(stlprofile.ConfigError, match="before a write"):
        stlgen.compile_stream(load(write_profile(tmp_path, vm)))


def test_signature_keeps_checksums_right(tmp_path):
    """With perfkit's signature in the payload (and random values), every checksum the profile
    fixes is still right; outside the signature the frames are TRex's."""
    vm = (WRITES + 'STLVmFlowVar(name="r", min_value=0, max_value=2**32 - 1, size=4, op="random"),'
          'STLVmWrFlowVar(fv_name="r", pkt_offset=70),' + FIXES)
    s = load(write_profile(tmp_path, vm))
    comp = stlgen.compile_stream(s, signature=True)
    assert comp.sig_offset == 42
    frames = stlgen.show(comp, 32)
    seqs = [struct.unpack_from("<HHII", f, 42)[2] for f in frames]
    assert seqs == list(range(32))
    for f in frames:
        assert_checksums(f)


@pytest.mark.parametrize("proto", ["tcp", "udp6", "icmp6"])
def test_l4_checksum_fixups(tmp_path, proto):
    """fix_checksum_hw for TCP over IPv4 and UDP over IPv6, fix_checksum_icmpv6: right in every frame."""
    base, fix, write = {
        "tcp": (f'Ether()/IP(src="{IP_A}", dst="{IP_B}")/TCP(sport=1025, dport=80)/(b"x" * 30)',
                'STLVmFixChecksumHw(l3_offset="IP", l4_offset="TCP", l4_type=CTRexVmInsFixHwCs.L4_TYPE_TCP)', '"IP.src"'),
        "udp6": ('Ether()/IPv6(src="2001:2::1", dst="2001:2::2")/UDP(sport=1025, dport=12)/(b"x" * 30)',
                 'STLVmFixChecksumHw(l3_offset="IPv6", l4_offset="UDP", l4_type=CTRexVmInsFixHwCs.L4_TYPE_UDP)', '34'),
        "icmp6": ('Ether()/IPv6(src="2001:2::1", dst="2001:2::2")/ICMPv6EchoRequest(data=b"x" * 30)',
                  'STLVmFixIcmpv6(l3_offset=14, l4_offset=54)', '34'),
    }[proto]
    vm = (f'STLVmFlowVar(name="a", min_value=1, max_value=1000, size=4, op="inc", step=97),'
          f'STLVmWrFlowVar(fv_name="a", pkt_offset={write}), {fix}')
    s = load(write_profile(tmp_path, vm, base=base))
    frames = bpf_frames(s, 24)
    assert frames == stlvm.frames(s, 24)
    assert len(set(frames)) == 24
    for f in frames:
        assert_checksums(f)
    signed = stlgen.compile_stream(s, signature=True)
    assert bool(signed.sig_offset) == (proto == "tcp")  # the sink finds signatures behind IPv4 only
    for f in stlgen.show(signed, 24):
        assert_checksums(f)


THREE = """[
    STLStream(name="a", packet=STLPktBuilder(pkt=Ether()/IP(src="198.18.0.1", dst="198.19.0.1")/UDP(sport=1, dport=2)/(b"x" * 40),
              vm=[STLVmFlowVar(name="v", min_value=0, max_value=6, size=2), STLVmWrFlowVar(fv_name="v", pkt_offset=34),
                  STLVmFixIpv4(offset=14)]), mode=STLTXCont(pps=10)),
    STLStream(name="b", packet=STLPktBuilder(pkt=Ether()/IP(src="198.18.0.2", dst="198.19.0.2")/UDP(sport=1, dport=2)/(b"x" * 30),
              vm=[STLVmFlowVar(name="w", min_value=100, max_value=104, size=1, op="dec"),
                  STLVmWrFlowVar(fv_name="w", pkt_offset=22), STLVmFixIpv4(offset=14)]), mode=STLTXCont(pps=5)),
    STLStream(name="c", packet=STLPktBuilder(pkt=Ether()/IP(src="198.18.0.3", dst="198.19.0.3")/UDP(sport=1, dport=2)/(b"x" * 40)),
              mode=STLTXCont(bps_L2=5 * 86 * 8)),
]"""


def test_several_streams_at_their_relative_rates(tmp_path):
    """Three continuous streams at 10, 5 and 5 pps (the last given in L2 bits/s): 2:1:1 of the frames,
    evenly interleaved, each stream's frames in its own order with its own field engine and its
    own signature stream."""
    prof = stlprofile.load(write_profile(tmp_path, "", streams=THREE))
    comp = stlgen.compile_profile(prof)
    assert comp.weights == (2, 1, 1) and comp.signed
    frames = stlgen.show(comp, 40)
    which = [f[33] - 1 for f in frames]  # the last byte of the destination address: the stream
    assert [which.count(i) for i in range(3)] == [20, 10, 10]
    assert all(set(which[i:i + 4]) == {0, 1, 2} for i in range(0, 40, 4))
    for i, st in enumerate(prof.streams):
        mine = [f for f, w in zip(frames, which) if w == i]
        sig = comp.streams[i].sig_offset
        assert {struct.unpack_from("<HHII", f, sig)[1] for f in mine} == {i}
        assert [struct.unpack_from("<HHII", f, sig)[2] for f in mine] == list(range(len(mine)))
        # outside the signature and the UDP checksum (kept right for the signature's bytes), TRex's bytes
        keep = [j for j in range(len(st.frame)) if not (sig <= j < sig + 12 or 40 <= j < 42)]
        assert [bytes(f[j] for j in keep) for f in mine] == [bytes(f[j] for j in keep)
                                                             for f in stlvm.frames(st, len(mine))]
        assert [len(f) for f in mine] == [len(st.frame)] * len(mine)
    for f, w in zip(frames, which):
        if w == 2:  # untouched by a VM: its UDP checksum stays right with the signature in
            assert_checksums(f)


def test_streams_differing_beyond_the_template_refused(tmp_path):
    """Streams whose frames differ after the restored first bytes cannot share the kernel's frame."""
    streams = THREE.replace('(b"x" * 30)', '(b"y" * 90)')
    prof = stlprofile.load(write_profile(tmp_path, "", streams=streams))
    with pytest.raises(stlprofile.ConfigError, match="differ"):
        stlgen.compile_profile(prof)


# -- perfkit's PGW-U profile in TRex's environment ---------------------------------------------------
@pytest.mark.parametrize("direction", ["ul", "dl"])
@pytest.mark.parametrize("flows", [1, 1000])
def test_pgwu_profile_equals_perfkit_templates(direction, flows):
    """trex_profiles/pgwu.py, loaded by the real STLProfile.load_py (without perfkit), sends for flow i
    the bytes of PgwuTraffic.packet(i), in order: TRex's engine (model) and the generator program."""
    tun = [f"dir={direction},flows={flows},frame_size=128"]
    s = load(ROOT / "trex_profiles" / "pgwu.py", tun)
    traffic = Scenario("pgwu", frame_size=128, flows=flows, params={"direction": direction}).traffic()
    want = [traffic.packet(i) for i in range(flows)]
    assert stlvm.frames(s, flows) == want
    comp = stlgen.compile_stream(s, signature=True)
    assert comp.sig_offset == traffic.offsets()["signature"]
    got = stlgen.show(comp, min(flows, 300))
    assert [stlgen.blank_signature(f, comp.sig_offset) for f in got] == want[:300]


def test_pgwu_profile_tenants_and_vlan():
    """Sessions over 1000 tenant VLANs (1,001,000 sessions, flows walk them all): the first frames."""
    tun = ["dir=dl,flows=1001000,sessions=1001000,vlan=1,frame_size=96"]
    s = load(ROOT / "trex_profiles" / "pgwu.py", tun)
    traffic = Scenario("pgwu", frame_size=96, flows=1001000,
                       params={"direction": "dl", "sessions": 1001000, "vlan": True}).traffic()
    idx = [0, 1, 2, 999, 1000, 1001, 2002]
    frames = stlvm.frames(s, max(idx) + 1)
    assert [frames[i] for i in idx] == [traffic.packet(i) for i in idx]


# -- refusals through the real CLI -------------------------------------------------------------------
REFUSED = {
    "isg": ("isg", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(), isg=-10)]"),
    "burst_count": ("total_pkts", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXSingleBurst(total_pkts=0))]"),
    "next": ("next", "[STLStream(name='a', packet=STLPktBuilder(pkt=base), mode=STLTXSingleBurst(), next='b'),"
                     " STLStream(name='b', packet=STLPktBuilder(pkt=base), mode=STLTXCont(), self_start=False)]"),
    "self_start": ("self_start", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(), self_start=False)]"),
    "flow_stats": ("flow_stats", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(),"
                                 " flow_stats=STLFlowStats(pg_id=1))]"),
    "latency": ("flow_stats", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont(),"
                              " flow_stats=STLFlowLatencyStats(pg_id=1))]"),
    "trim_pkt_size": ("trim_pkt_size", "[STLStream(packet=STLPktBuilder(pkt=base, vm=[STLVmFlowVar(name='l',"
                      " min_value=60, max_value=80, size=2), STLVmTrimPktSize('l')]), mode=STLTXCont())]"),
    "rand_limit": ("flow_var_rand_limit", "[STLStream(packet=STLPktBuilder(pkt=base, vm=[STLVmFlowVarRepeatableRandom("
                   "name='r', size=2, limit=5, seed=1, min_value=0, max_value=9)]), mode=STLTXCont())]"),
    "next_var": ("next_var", "[STLStream(packet=STLPktBuilder(pkt=base, vm=[STLVmFlowVar(name='a', max_value=3,"
                 " next_var='b'), STLVmFlowVar(name='b', max_value=3)]), mode=STLTXCont())]"),
    "value_list": ("value_list", "[STLStream(packet=STLPktBuilder(pkt=base, vm=[STLVmFlowVar(name='a',"
                   " value_list=[1, 5, 9], size=1)]), mode=STLTXCont())]"),
    "cache": ("cache", "[STLStream(packet=STLPktBuilder(pkt=base, vm=STLScVmRaw([STLVmFlowVar(name='a')],"
              " cache_size=10)), mode=STLTXCont())]"),
    "five_streams": ("streams", "[STLStream(packet=STLPktBuilder(pkt=base), mode=STLTXCont()) for _ in range(5)]"),
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def cli(perfkit_module: ScriptForks) -> Callable[..., subprocess.CompletedProcess]:
    """``python -m perfkit`` processes forked from a server that has imported perfkit's third-party
    libraries (``tests/script_forks.py``): what ``run_cli`` gives, without 1.3 s of imports each."""
    return lambda *args: perfkit_module.run(list(args), cwd=ROOT)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_in_one_line(tmp_path, case, cli):
    """Each mode or instruction the local generator does not send: exit 2, one line naming it."""
    word, streams = REFUSED[case]
    path = write_profile(tmp_path, "", streams=streams)
    r = cli("trex-profile", "show", str(path), "--count", "1")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert word in lines[0] and "allowed" in lines[0], lines[0]


def test_pcap_profile_refused(tmp_path, cli):
    """A pcap as profile (TRex makes bursts chained by next): refused in one line."""
    from scapy.utils import wrpcap

    pcap = tmp_path / "p.pcap"
    wrpcap(str(pcap), [Ether() / IP(src=IP_A, dst=IP_B) / UDP() / (b"x" * 30)] * 3)
    r = cli("trex-profile", "show", str(pcap))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "pcap" in r.stderr and "allowed" in r.stderr


def test_trial_refuses_before_the_testbed(tmp_path, cli):
    """perfkit trial --trex-profile with a next-stream chain: exit 2, one line, and no testbed came up."""
    path = write_profile(tmp_path, "", streams=REFUSED["next"][1])
    r = cli("trial", "--dataplane", "pgwu", "--trex-profile", str(path), "--rate", "1kpps", "--duration", "0.1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "next" in r.stderr


def test_show_writes_pcap(tmp_path, cli):
    """perfkit trex-profile show --pcap: the frames of the generator program, TRex's without signature."""
    from scapy.utils import rdpcap

    path = write_profile(tmp_path, DETERMINISTIC)
    out = tmp_path / "o.pcap"
    r = cli("trex-profile", "show", str(path), "--count", "20", "--pcap", str(out), "--no-signature")
    assert r.returncode == 0, r.stderr
    # as TRex sends them from port 0 of the local testbed: its MACs (the profile's Ether() keeps none)
    s = stlprofile.load(path, macs=stlmacs.testbed_macs(0)).streams[0]
    assert [bytes(p) for p in rdpcap(str(out))] == stlvm.frames(s, 20)


# -- trials on the local testbed (XDP generator -> PGW-U -> sink) -------------------------------------
def hex_profile(tmp_path: Path, frames: list[bytes], pps: list[float], vm: str = "", name: str = "t.py") -> Path:
    """A profile sending ``frames`` (one continuous stream each, at ``pps``); ``vm`` for the first."""
    streams = ", ".join(
        f"STLStream(name='s{i}', packet=STLPktBuilder(pkt_buffer=bytes.fromhex('{f.hex()}')"
        + (f", vm=[{vm}]" if vm and i == 0 else "") + f"), mode=STLTXCont(pps={p}))"
        for i, (f, p) in enumerate(zip(frames, pps)))
    return write_profile(tmp_path, "", base="None", streams=f"[{streams}]", name=name)


def exact(r, n: int) -> bool:
    """``n`` frames offered and every one received, or counted as lost to a full receive ring."""
    ring = r.dut_drops.get("rx_ring_full", 0) + r.tester_drops.get("rx_ring_full", 0)
    return (r.tx_packets == n and r.rx_packets + ring == n and set(r.dut_drops) <= {"rx_ring_full"}
            and set(r.tester_drops) <= {"rx_ring_full"})


def test_trial_pgwu_profile_exact_and_checked():
    """trex_profiles/pgwu.py (uplink, 100 flows) against the PGW-U: exact counts by signature, every
    captured frame what the PGW-U model says, the trial says where its traffic came from."""
    from perfkit.generators import create

    scenario = Scenario("pgwu", frame_size=128, flows=100, params={"direction": "ul"})
    with create("xdp", scenario, trex_profile=str(ROOT / "trex_profiles" / "pgwu.py"),
                trex_tunables=["flows=100,frame_size=128"]) as gen:
        r = gen.measure(50_000, 1.0, packets=20_000)
    assert exact(r, 20_000), r.to_dict()
    assert r.mismatched_packets == 0 and r.reordered == 0 and r.duplicates == 0
    assert any("TRex profile" in n and "signature in every frame" in n for n in r.notes), r.notes
    assert not any("unaccounted" in n or "without a signature" in n for n in r.notes), r.notes


def test_trial_unsigned_and_several_streams(tmp_path):
    """Downlink frames of two streams at 3:1, the first with a VM writing where the signature would
    go: counted by the sink's frame totals (said in the notes), exact, output checked by the model."""
    from perfkit.generators import create

    scenario = Scenario("pgwu", frame_size=128, flows=2, params={"direction": "dl"})
    traffic = scenario.traffic()
    sig = traffic.offsets()["signature"]
    vm = (f"STLVmFlowVar(name='v', min_value=0, max_value=9, size=4), STLVmWrFlowVar(fv_name='v', pkt_offset={sig})")
    path = hex_profile(tmp_path, [traffic.packet(0), traffic.packet(1)], [300, 100], vm=vm)
    with create("xdp", scenario, trex_profile=str(path)) as gen:
        assert gen.stl.weights == (3, 1) and not gen.stl.streams[0].sig_offset and gen.stl.streams[1].sig_offset
        r = gen.measure(40_000, 1.0, packets=8_000)
    assert exact(r, 8_000), r.to_dict()
    assert r.mismatched_packets == 0
    assert any("no signature" in n and "frames the sink counted" in n for n in r.notes), r.notes


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_random_stays_in_range(tmp_path, size):
    """random: every value in [min, max] (TRex's own sequence is its per-core seed's, not checked)."""
    lo, hi = (1 << (8 * size - 1)) - 3, (1 << (8 * size - 1)) + 3
    vm = f'STLVmFlowVar(name="r", min_value={lo}, max_value={hi}, size={size}, op="random"),' \
         f'STLVmWrFlowVar(fv_name="r", pkt_offset=50)'
    values = field(bpf_frames(load(write_profile(tmp_path, vm)), 200), 50, size)
    assert set(values) <= set(range(lo, hi + 1)) and len(set(values)) == hi - lo + 1


@pytest.mark.parametrize("options, field", [
    ("{trex_profile: nope.py}", "campaign.generator.options.trex_profile"),
    ("{trex_profile: trex_profiles/pgwu.py, trex_tunables: [flows]}", "campaign.generator.options.trex_tunables"),
    ("{trex_tunables: ['flows=2']}", "campaign.generator.options.trex_tunables"),
])
def test_campaign_options_checked(options, field, monkeypatch):
    """A campaign's trex_profile and trex_tunables are checked, the error naming the field."""
    from perfkit.campaign.schema import parse_campaign

    monkeypatch.chdir(ROOT)
    text = ("name: t\ndataplane: pgwu\nframe_sizes: [128]\nmethods:\n  - method: maxrate\n"
            f"generator:\n  backend: xdp\n  options: {options}\n")
    with pytest.raises(stlprofile.ConfigError) as err:
        parse_campaign(text)
    assert err.value.field == field
    ok = parse_campaign(text.replace(options, "{trex_profile: trex_profiles/pgwu.py, trex_tunables: ['flows=2']}"))
    assert ok.generator.options["trex_profile"] == "trex_profiles/pgwu.py"


@pytest.mark.parametrize("args, word", [
    (["--generator", "sim"], "--trex-profile"),
    (["-t", "flows"], "-t"),
    (["-t", "bogus=1"], "bogus"),
])
def test_trial_bad_trex_options_one_line(args, word, cli):
    """Bad --trex-profile companions: exit 2, one line naming the option, before any testbed."""
    r = cli("trial", "--dataplane", "pgwu", "--trex-profile", str(ROOT / "trex_profiles" / "pgwu.py"),
                "--rate", "1kpps", "--duration", "0.1", *args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert word in r.stderr


def test_trial_missing_profile_one_line(cli):
    args = ("trial", "--dataplane", "pgwu", "--trex-profile", "no/such.py", "--rate", "1kpps")
    r = cli(*args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--trex-profile" in r.stderr, r.stderr
    cold = run_cli(*args)                      # the forked process is what a cold python -m perfkit gives
    assert (cold.returncode, cold.stdout, cold.stderr) == (r.returncode, r.stdout, r.stderr)


def random_vm(rng, tcp: bool) -> str:
    """A random deterministic field engine over BASE-like frames: variables of every size and op,
    writes and mask writes anywhere in the first 80 bytes but the checksums, then the fix-ups."""
    # not the checksums, nor the IPv4 header length, total length and protocol (refused: they decide
    # what the checksums cover)
    # what the checksums cover); nor UDP's length and TCP's data offset (scapy, checking, reads them)
    csum = {14, 16, 17, 23, 24, 25} | ({46, 50, 51} if tcp else {38, 39, 40, 41})
    ins, names = [], []
    for v in range(rng.randint(1, 4)):
        size = rng.choice([1, 2, 4, 8])
        top = (1 << (8 * size)) - 1
        top -= 64 if size == 8 else 0  # TRex's client wants room to pad the range to a whole cycle
        lo = rng.randint(50, top)  # and, for dec, room below min (steps are <= 50)
        hi = min(top, lo + rng.randint(0, 40)) if rng.random() < 0.7 else rng.randint(lo, top)
        op = rng.choice(["inc", "dec"])
        init = rng.randint(lo, hi)
        ins.append(f'STLVmFlowVar(name="v{v}", min_value={lo}, max_value={hi}, init_value={init}, size={size}, '
                   f'op="{op}", step={rng.randint(1, 50)})')
        names.append((f"v{v}", size))
    if rng.random() < 0.5:
        ins.append('STLVmTupleGen(name="t", ip_min="198.18.0.1", ip_max="198.18.0.9", port_min=1000, port_max=1003, '
                   f'limit_flows={rng.choice([0, 7, 30])})')
        names += [("t.ip", 4), ("t.port", 2)]
    for _ in range(rng.randint(1, 6)):
        name, size = rng.choice(names)
        if rng.random() < 0.3 and size <= 4:
            cast, big = rng.choice([1, 2, 4]), rng.random() < 0.8
            width = cast if big else size  # TRex's little-endian mask write spans the variable's size
            off = rng.choice([o for o in range(14, 80 - width) if not set(range(o, o + width)) & csum])
            ins.append(f'STLVmWrMaskFlowVar(fv_name="{name}", pkt_offset={off}, pkt_cast_size={cast}, '
                       f'mask={rng.randint(1, (1 << (8 * cast)) - 1)}, shift={rng.randint(-8, 8)}, '
                       f'add_value={rng.randint(-5, 5)}, is_big={big})')
        else:
            off = rng.choice([o for o in range(14, 80 - size) if not set(range(o, o + size)) & csum])
            ins.append(f'STLVmWrFlowVar(fv_name="{name}", pkt_offset={off}, add_val={rng.randint(-3, 3)}, '
                       f'is_big={rng.random() < 0.8})')
    ins.append('STLVmFixIpv4(offset="IP")')
    l4 = "TCP" if tcp else "UDP"
    ins.append(f'STLVmFixChecksumHw(l3_offset="IP", l4_offset="{l4}", l4_type=CTRexVmInsFixHwCs.L4_TYPE_{l4})')
    return ", ".join(ins)


@pytest.mark.parametrize("seed", range(40))
def test_random_engines_byte_identical(tmp_path, seed):
    """Random deterministic field engines (loaded by TRex's library): the generator program's frames
    equal the model's, byte for byte and in order; with the signature in, every checksum is right."""
    import random

    rng = random.Random(seed)
    tcp = seed % 3 == 0
    l4 = "TCP(sport=1025, dport=80)" if tcp else "UDP(sport=1025, dport=12)"
    base = f'Ether()/IP(src="{IP_A}", dst="{IP_B}")/{l4}/(b"x" * 60)'
    s = load(write_profile(tmp_path, random_vm(rng, tcp), base=base))
    assert bpf_frames(s, 80) == stlvm.frames(s, 80)
    comp = stlgen.compile_stream(s, signature=True)
    for f in stlgen.show(comp, 40):
        assert_checksums(f)


def test_cli_trial_with_profile_json():
    """perfkit trial --trex-profile through the real CLI: downlink (TRex port 1, so the profile's
    direction is downlink without dir=), exact counts, checked output, the note in the JSON."""
    import json

    r = run_cli("trial", "--dataplane", "pgwu", "--direction", "dl", "--flows", "10", "--frame-size", "256",
                "--trex-profile", str(ROOT / "trex_profiles" / "pgwu.py"), "-t", "flows=10", "-t", "frame_size=256",
                "--rate", "20kpps", "--packets", "4000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tx_packets"] == 4000 and d["rx_packets"] + d["dut_drops"].get("rx_ring_full", 0) == 4000, d
    assert d["mismatched_packets"] == 0 and d["wire_frame_size"] == 256
    assert any("pgwu-dl" in n and "signature in every frame" in n for n in d["notes"]), d["notes"]
