"""IP addresses on the local testbed: a TRex profile's addresses outside 198.18.0.0/15 and
2001:2::/48 mapped into them before the local generator sends it (``perfkit.stl.addresses``),
checked on the frames of the real generator program and on what the DUT side received."""
from __future__ import annotations

import ipaddress
import json
import socket
from typing import Any, Callable

import pytest

from perfkit.errors import ConfigError
from perfkit.stl import addresses
from perfkit.stl import macs as stlmacs
from perfkit.stl import profile as stlprofile
from perfkit.testbed import stlgen
from tests.conftest import ROOT
from tests.script_forks import ScriptForks
from tests.test_stlprofile import write_profile

EXAMPLES = ROOT / "tests" / "data" / "trex_stl"
IMIX, MPLS_BURST, IPV6 = EXAMPLES / "imix.py", EXAMPLES / "udp_1pkt_mpls_vm.py", EXAMPLES / "udp_ipv6_vm.py"
V4, V6 = ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:2::/48")


@pytest.fixture(scope="module")
def cli(perfkit_module: ScriptForks) -> Callable:
    return lambda *args: perfkit_module.run(list(args), cwd=ROOT)


def ip_layers(frame: bytes) -> list[Any]:
    """Every IPv4 / IPv6 layer scapy finds (MPLS bound)."""
    from scapy.contrib.mpls import MPLS
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    assert pkt.type != 0x8847 or MPLS in pkt
    return [layer for layer in pkt.layers() for layer in [pkt.getlayer(layer)] if isinstance(layer, (IP, IPv6))]


def ipv4_ok(ip: Any) -> bool:
    """The header checksum is right (scapy's checksum over the header is 0)."""
    from scapy.compat import raw
    from scapy.utils import checksum

    return checksum(raw(ip)[:ip.ihl * 4]) == 0


def udp_ok(ip: Any) -> bool:
    """The UDP checksum over scapy's pseudo-header is right."""
    from scapy.compat import raw
    from scapy.layers.inet import UDP
    from scapy.layers.inet import in4_chksum
    from scapy.layers.inet6 import in6_chksum

    udp = ip[UDP]
    seg = raw(udp)[:udp.len]
    chk = in4_chksum if ip.version == 4 else in6_chksum
    return chk(socket.IPPROTO_UDP, ip, seg) == 0


def frames_of(profile: stlprofile.StlProfile, count: int, testbed: bool) -> list[bytes]:
    """The first frames of the real generator program (BPF_PROG_TEST_RUN), as ``show`` builds them."""
    compiled = stlgen.for_testbed(profile) if testbed else stlgen.compile_profile(profile)
    return stlgen.show(compiled, count)


@pytest.mark.parametrize("path", [IMIX, MPLS_BURST], ids=["imix", "mpls"])
def test_examples_sent_inside_the_ranges(path):
    """TRex's examples for the testbed: every IPv4 source and destination (the one behind two MPLS
    labels too) in 198.18.0.0/15, low 16 bits as TRex's own frames carry them (16.0.0.1, .2 ... ->
    198.18.0.1, .2 ...), IPv4 checksums right, UDP checksums right wherever TRex's are (imix fixes
    only the IPv4 header per packet, so TRex's own UDP checksums are wrong but for the template's
    addresses: the same frames are wrong here)."""
    profile = stlprofile.load(path, macs=stlmacs.testbed_macs(0))
    n = 100
    trex, sent = frames_of(profile, n, False), frames_of(profile, n, True)
    assert len(sent) == len(trex) == n
    firsts: list[str] = []
    for a, b in zip(trex, sent):
        (ta,), (sb,) = ip_layers(a), ip_layers(b)
        assert ipaddress.ip_address(sb.src) in V4 and ipaddress.ip_address(sb.dst) in V4, (sb.src, sb.dst)
        assert (ta.src.split(".")[:2], ta.dst.split(".")[:2]) == (["16", "0"], ["48", "0"])
        assert sb.src.split(".")[:2] == ["198", "18"] and sb.dst.split(".")[:2] == ["198", "19"]
        assert sb.src.split(".")[2:] == ta.src.split(".")[2:] and sb.dst.split(".")[2:] == ta.dst.split(".")[2:]
        assert ipv4_ok(ta) and ipv4_ok(sb)
        assert udp_ok(sb) == udp_ok(ta)
        if len(a) == 60:
            firsts.append(ta.src)
    if path == MPLS_BURST:
        assert all(udp_ok(ip_layers(f)[0]) for f in sent)
        assert ip_layers(sent[0])[0].src == "198.18.0.1" and ip_layers(sent[0])[0].dst == "198.19.0.1"
    else:  # the 60-byte stream walks TRex's range 16.0.0.1 .. : its own sequence
        assert firsts[:5] == [f"16.0.0.{i}" for i in range(1, 6)]
        assert sum(udp_ok(ip_layers(f)[0]) for f in sent) < n // 2  # most wrong, as TRex's


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_show_keeps_trex_addresses(cli):
    """show prints TRex's addresses; --testbed-addresses the testbed's, with the mappings."""
    r = cli("trex-profile", "show", str(IMIX), "--count", "4", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [f[52:60] for f in d["frames"]][:1] == ["10000001"] and d["frames"][0][60:68] == "30000001"
    assert d["address_maps"] == [] and not d["testbed_addresses"]
    r = cli("trex-profile", "show", str(IMIX), "--count", "4", "--testbed-addresses", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["frames"][0][52:68] == "c6120001c6130001"
    assert d["address_maps"] == ["16.0.0.0/16 -> 198.18.0.0/16", "48.0.0.0/16 -> 198.19.0.0/16"]
    r = cli("trex-profile", "show", str(MPLS_BURST), "--count", "2", "--testbed-addresses")
    assert r.returncode == 0 and "16.0.0.0/16 -> 198.18.0.0/16" in r.stdout, r.stderr


BASE = 'Ether()/IP(src="16.0.0.1", dst="48.0.0.1")/UDP(sport=1025, dport=12)/(b"x" * 30)'


@pytest.mark.parametrize("vm, what", [
    ('STLVmFlowVar(name="src", min_value="16.0.255.250", max_value="16.1.0.5", size=4, op="inc"),'
     ' STLVmWrFlowVar(fv_name="src", pkt_offset="IP.src")', "flow_var 'src'"),
    ('STLVmTupleGen(name="t", ip_min="16.0.255.250", ip_max="16.1.0.5", port_min=1025, port_max=1025),'
     ' STLVmWrFlowVar(fv_name="t.ip", pkt_offset="IP.dst")', "tuple_flow_var 't'"),
    ('STLVmFlowVar(name="b", min_value=1, max_value=9, size=1, op="inc"),'
     ' STLVmWrFlowVar(fv_name="b", pkt_offset="IP.src", offset_fixup=1)', "flow_var 'b'"),
    ('STLVmFlowVar(name="m", min_value=1, max_value=9, size=2, op="inc"),'
     ' STLVmWrMaskFlowVar(fv_name="m", pkt_offset="IP.dst", pkt_cast_size=4, mask=0x00FF0000, shift=16)',
     "flow_var 'm'"),
], ids=["spans-two-16s", "tuple-spans", "byte-of-high", "mask-into-high"])
def test_unmappable_writes_refused(tmp_path, vm, what):
    """A variable spanning two /16s, or a partial or masked write into an address's high 16 bits:
    refused, naming the stream, the variable, its range and what is allowed."""
    path = write_profile(tmp_path, vm, base=BASE)
    with pytest.raises(ConfigError) as err:
        stlgen.for_testbed(stlprofile.load(path))
    assert what in str(err.value) and "198.18.0.0/15" in str(err.value) and "stream 0" in str(err.value)


def test_an_unmappable_write_is_one_line_exit_2_and_show_without_mapping_works(tmp_path, cli):
    """The refusal through the CLI (exit 2, one line); show without --testbed-addresses still shows
    TRex's frames."""
    path = write_profile(tmp_path, 'STLVmFlowVar(name="src", min_value="16.0.255.250", max_value="16.1.0.5", size=4, '
                                   'op="inc"), STLVmWrFlowVar(fv_name="src", pkt_offset="IP.src")', base=BASE)
    r = cli("trex-profile", "show", str(path), "--count", "2", "--testbed-addresses")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "flow_var 'src'" in r.stderr and "198.18.0.0/15" in r.stderr and "stream 0" in r.stderr, r.stderr
    assert cli("trex-profile", "show", str(path), "--count", "2").returncode == 0


@pytest.mark.parametrize("vm, first", [
    ('STLVmFlowVar(name="s", min_value="16.0.0.1", max_value="16.0.0.3", size=4, op="inc"),'
     ' STLVmWrFlowVar(fv_name="s", pkt_offset="IP.src"), STLVmFixIpv4(offset="IP")', "198.18.0.1"),
    ('STLVmTupleGen(name="t", ip_min="16.0.0.1", ip_max="16.0.0.3", port_min=1025, port_max=1025),'
     ' STLVmWrFlowVar(fv_name="t.ip", pkt_offset="IP.src"), STLVmFixIpv4(offset="IP")', "198.18.0.1"),
    ('STLVmFlowVar(name="s", min_value=1, max_value=3, size=4, op="inc"),'
     ' STLVmWrFlowVar(fv_name="s", pkt_offset="IP.src", add_val=0x10000000), STLVmFixIpv4(offset="IP")',
     "198.18.0.1"),
    ('STLVmFlowVar(name="s", min_value="198.18.255.255", max_value="198.19.0.1", size=4, op="inc"),'
     ' STLVmWrFlowVar(fv_name="s", pkt_offset="IP.src"), STLVmFixIpv4(offset="IP")', "198.18.255.255"),
    ('STLVmFlowVar(name="lo", min_value=1, max_value=3, size=2, op="inc"),'
     ' STLVmWrFlowVar(fv_name="lo", pkt_offset="IP.src", offset_fixup=2), STLVmFixIpv4(offset="IP")', "198.18.0.1"),
], ids=["flow-var", "tuple", "add-value", "inside-already", "low-bits"])
def test_mappable_writes(tmp_path, vm, first):
    """Whole-address writes within one /16 (flow_var, tuple, through add_value), values already
    inside, writes of the low 16 bits: every frame's source in range, low bits TRex's."""
    stream = stlprofile.load(write_profile(tmp_path, vm, base=BASE))
    trex, sent = frames_of(stream, 6, False), frames_of(stream, 6, True)
    srcs = [ip_layers(f)[0].src for f in sent]
    assert srcs[0] == first and all(ipaddress.ip_address(s) in V4 for s in srcs), srcs
    for a, b in zip(trex, sent):
        assert ip_layers(a)[0].src.split(".")[2:] == ip_layers(b)[0].src.split(".")[2:]
        assert ipv4_ok(ip_layers(b)[0]) and ip_layers(b)[0].dst == "198.19.0.1"


def test_ipv6_mapped_into_rfc5180(cli):
    """An IPv6 profile (tests/data/trex_stl/udp_ipv6_vm.py): sources into 2001:2::/64, destinations
    into 2001:2:0:1::/64, the low 64 bits (walked by the VM) kept, UDP checksums right."""
    profile = stlprofile.load(IPV6)
    trex, sent = frames_of(profile, 5, False), frames_of(profile, 5, True)
    for i, (a, b) in enumerate(zip(trex, sent)):
        (ta,), (sb,) = ip_layers(a), ip_layers(b)
        assert ta.src == f"2001:db8::{i + 1}" and ta.dst == "2001:db8:1::5"
        assert sb.src == f"2001:2::{i + 1}" and sb.dst == "2001:2:0:1::5"
        assert ipaddress.ip_address(sb.src) in V6 and udp_ok(sb) and udp_ok(ta)
    r = cli("trex-profile", "show", str(IPV6), "--count", "1", "--testbed-addresses", "--json")
    assert json.loads(r.stdout)["address_maps"] == ["2001:db8::/64 -> 2001:2::/64",
                                                    "2001:db8:1::/64 -> 2001:2:0:1::/64"], r.stderr


def test_ipv6_high_write_refused(tmp_path):
    """A variable written into an IPv6 address's high 64 bits: refused in one line."""
    base = 'Ether()/IPv6(src="2001:db8::1", dst="2001:db8:1::5")/UDP(sport=1025, dport=12)/(b"x" * 30)'
    vm = ('STLVmFlowVar(name="hi", min_value=1, max_value=9, size=8, op="inc"),'
          ' STLVmWrFlowVar(fv_name="hi", pkt_offset="IPv6.dst")')
    with pytest.raises(ConfigError, match="flow_var 'hi'.*IPv6 dst.*2001:2::/48"):
        addresses.for_testbed(stlprofile.load(write_profile(tmp_path, vm, base=base)))


def test_wrong_checksum_stays_wrong():
    """A template checksum that was wrong stays wrong; right ones are recomputed."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    good = bytes(Ether() / IP(src="16.0.0.1", dst="48.0.0.1") / UDP() / (b"x" * 20))
    bad = bytearray(good)
    bad[24:26] = b"\x12\x34"  # the IPv4 header checksum
    out_good, _ = addresses.translate_frame(good)
    out_bad, _ = addresses.translate_frame(bytes(bad))
    assert ipv4_ok(ip_layers(out_good)[0]) and udp_ok(ip_layers(out_good)[0])
    assert out_bad[24:26] == b"\x12\x34" and udp_ok(ip_layers(out_bad)[0])


# -- on the local testbed ----------------------------------------------------------------------------
@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_imix_on_the_testbed_sends_only_permitted_addresses(tmp_path):
    """TRex's imix.py on the testbed: what the DUT side received (the sink's capture) carries only
    addresses in 198.18.0.0/15, and the trial's notes say what was mapped."""
    from perfkit.generators import create
    from scapy.utils import rdpcap
    from tests.test_stlsend import CALIB

    pcap = tmp_path / "rx.pcap"
    with create("xdp", CALIB, trex_profile=str(IMIX), capture=str(pcap), capture_count=64) as gen:
        r = gen.measure(12_000, 0.5, packets=1200)
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    assert len(frames) == 64 and r.rx_packets > 0, r.to_dict()
    for f in frames:
        (ip,) = ip_layers(f)
        assert ipaddress.ip_address(ip.src) in V4 and ipaddress.ip_address(ip.dst) in V4, (ip.src, ip.dst)
    assert any(n.startswith("addresses outside 198.18.0.0/15") and "16.0.0.0/16 -> 198.18.0.0/16" in n
               for n in r.notes), r.notes


def test_headers_inside_tunnels_mapped():
    """Headers behind QinQ + VXLAN, GRE and an IPv6 fragment header are found and mapped, and every
    checksum comes out as scapy computes it for the mapped frame (outer UDP over the inner frame too)."""
    from scapy.layers.inet import GRE, IP, TCP, UDP
    from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6, IPv6ExtHdrFragment
    from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
    from scapy.layers.vxlan import VXLAN

    cases = [
        (Ether() / Dot1AD(vlan=1) / Dot1Q(vlan=2) / IP(src="10.0.0.1", dst="8.0.0.1") / UDP(dport=4789) / VXLAN()
         / Ether() / IP(src="16.0.0.9", dst="48.0.0.9") / TCP() / "abc",
         [("198.18.0.1", "198.19.0.1"), ("198.18.0.9", "198.19.0.9")]),
        (Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / GRE() / IPv6(src="2001:db8::1", dst="2001:db8:9::1")
         / ICMPv6EchoRequest(), [("198.18.3.4", "198.19.7.8"), ("2001:2::1", "2001:2:0:1::1")]),
        (Ether() / IPv6(src="2001:db8::1", dst="2001:2::7") / IPv6ExtHdrFragment() / UDP() / "x",
         [("2001:2::1", "2001:2::7")]),
    ]
    for pkt, want in cases:
        out, _ = addresses.translate_frame(bytes(pkt))
        got = Ether(out)
        assert [(ip.src, ip.dst) for ip in got.iterpayloads() if isinstance(ip, (IP, IPv6))] == want
        for layer in got.iterpayloads():  # let scapy recompute every checksum
            for name in ("chksum", "cksum"):
                if name in layer.fields and not isinstance(layer, VXLAN):
                    delattr(layer, name)
        assert bytes(Ether(bytes(got))) == out
