"""The dataplane seam: generic modules know a dataplane only through ``perfkit.dataplane``.

Code outside ``perfkit/dataplanes/`` (and every notebook) must not name a dataplane, its scenario
parameters or its counters: adding a dataplane then touches no generic module. Docstrings and
comments may use one as an example; identifiers and string literals may not.

Protocols are data too: a dataplane declares its tunnels and its steering words as header fields
(``perfkit.encap``), and the generic sink, signature finder and steering program follow the
declaration. A toy VXLAN gateway, declared here and nowhere else, shows it with real frames.
"""
from __future__ import annotations

import ast
import json
import re
import struct
import time
from pathlib import Path

import pytest
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from perfkit import dataplanes
from perfkit.dataplane import Dataplane
from perfkit.encap import BY_DADDR, Encap, Steering, Word, innermost_l4
from perfkit.errors import ConfigError
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.libbpf import BpfObject
from perfkit.testbed.bpfbuild import object_path
from perfkit.scenario import Scenario
from perfkit.testbed import stlgen
from perfkit.testbed.sink import Sink
from perfkit.trial import RECORD_COLUMNS, TrialResult
from tests.conftest import ROOT

GENERIC = sorted(p for p in (ROOT / "perfkit").rglob("*.py") if "dataplanes" not in p.relative_to(ROOT).parts)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _forbidden() -> re.Pattern[str]:
    words = {"teid", "maglev", *dataplanes.names()}
    words |= {w.upper() for w in words} | {w.capitalize() for w in words}
    for name in dataplanes.names():
        dp = dataplanes.get(name)
        # parameters and counters are lower-case identifiers: ``protocol`` is the LB's, ``Protocol`` typing's
        words |= {*dp.forward_counters, *(p.name for p in dp.params)}
    words -= {"vlan"}  # a protocol every generic parser and capture filter may know
    return re.compile(r"\b(" + "|".join(sorted(map(re.escape, words))) + r")\b")


def _names_and_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every identifier and non-docstring string literal in ``source``."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    # a string right after an assignment documents it (``x = 1`` then ``"""what x is"""``)
    for n in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(n, field, None)
            if isinstance(stmts, list):
                for a, b in zip(stmts, stmts[1:]):
                    if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(b, ast.Expr) \
                            and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                        docstrings.add(id(b.value))
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.append((n.lineno, n.id))
        elif isinstance(n, ast.Attribute):
            out.append((n.lineno, n.attr))
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.append((n.lineno, n.name))
        elif isinstance(n, ast.arg):
            out.append((n.lineno, n.arg))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            out.append((n.lineno, n.value))
    return out


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_generic_module_names_a_dataplane(path: Path) -> None:
    bad = _forbidden()
    hits = [f"{path.name}:{line}: {text!r}" for line, text in _names_and_strings(path.read_text()) if bad.search(text)]
    assert not hits, "dataplane knowledge in a generic module:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_names_a_dataplane(path: Path) -> None:
    bad = _forbidden()
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    hits = []
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            continue  # the parameters cell may name a default run or dataplane
        hits += [f"cell {i}:{line}: {text!r}" for line, text in _names_and_strings(src) if bad.search(text)]
    assert not hits, "dataplane knowledge in a notebook:\n" + "\n".join(hits)


def test_every_dataplane_is_registered_and_complete() -> None:
    assert set(dataplanes.names()) >= {"pgwu"}
    reserved = {c.strip() for key in RECORD_COLUMNS for c in key.split(",")}
    for name in dataplanes.names():
        dp = dataplanes.get(name)
        assert isinstance(dp, Dataplane) and dp.name == name
        assert dp.variant in {p.name for p in dp.params}
        assert not {p.name for p in dp.params} & reserved, "a parameter would shadow a record column"
        defaults = dp.validate({})
        traffic = dp.traffic(128, 2, defaults)
        assert traffic.wire_frame_size >= 64 and traffic.ingress in ("a", "b")
        if dp.has_model:  # optional (NotProvided without one)
            assert dp.check_output(traffic, traffic.expected_output(1)) is None
            assert dp.check_output(traffic, traffic.packet(1)) is not None, "the offered frame is not a correct output"


def test_the_seam_imports_nothing_from_the_testbed() -> None:
    tree = ast.parse((ROOT / "perfkit" / "dataplane.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m.startswith("perfkit.testbed")]


def test_parameters_are_validated_by_their_dataplane() -> None:
    with pytest.raises(ConfigError, match=r"pgwu parameter: 'protocol' is not allowed; allowed: direction, session_table, sessions"):
        Scenario("pgwu", params={"protocol": "tcp"})
    with pytest.raises(ConfigError, match=r"^direction: 'up' is not allowed; allowed: ul, dl, host$"):
        Scenario("pgwu", params={"direction": "up"})
    with pytest.raises(ConfigError, match=r"^sessions: -1 is not allowed; allowed: an integer 0 <= n$"):
        Scenario("pgwu", params={"sessions": -1})
    with pytest.raises(ConfigError, match=r"^dataplane: 'bng' is not allowed"):
        Scenario("bng")


def test_one_scenario_key_everywhere() -> None:
    """Scenario.key, TrialResult.scenario_key and the stored record agree, VLAN and sessions included."""
    sc = Scenario("pgwu", 512, 4, 1, params={"direction": "dl", "vlan": True, "sessions": 200_000})
    assert sc.key == "pgwu-dl-512B-4flow-1core-vlan-200000sess"
    result = TrialResult.for_scenario(sc, wire_frame_size=516, generator="sim", duration=1.0, intended_pps=1.0,
                                      intended_packets=1, tx_packets=1, rx_packets=1)
    rec = result.to_record()
    assert result.scenario_key == rec["scenario_key"] == sc.key
    assert rec["direction"] == "dl" and rec["vlan"] is True and rec["variant"] == "dl"
    back = TrialResult.from_record(rec)
    assert back.params == dict(sc.params) and back.scenario_key == sc.key


def test_records_written_before_dataplane_params_still_load() -> None:
    old = {"dataplane": "pgwu", "direction": "dl", "frame_size": 64, "wire_frame_size": 64, "flows": 1,
           "dut_cores": 1, "generator": "sim", "duration": 1.0, "intended_pps": 1.0, "intended_packets": 1,
           "tx_packets": 1, "rx_packets": 1, "udp_csum": True, "sessions": 1}
    r = TrialResult.from_record(old)
    assert r.params == {"direction": "dl", "sessions": 1, "udp_csum": True, "vlan": False, "session_table": "hash"}
    assert r.scenario_key == "pgwu-dl-64B-1flow-1core-csum-1sess"


# -- a third dataplane's protocol, declared, not coded ------------------------------------------------
#: VXLAN (RFC 7348): UDP to port 4789, an 8-byte header (flags, VNI), then an Ethernet frame.
VXLAN_ENCAP = Encap("VXLAN", ip_proto=17, udp_dport=4789, header_len=8, inner="ether")


class ToyVxlanGateway(Dataplane):
    """The declarations of a VXLAN gateway that does not exist: its tunnel, and its packets spread
    over DUT cores by their VNI (the outer addresses and ports are the same for all of a tunnel's
    flows), other packets by their destination."""

    name = "toy-vxlan"
    encaps = (VXLAN_ENCAP,)
    steering = Steering((Word("ip", 16), Word("tunnel", 4)), tunnel=VXLAN_ENCAP)


def vxlan_frame(vni: int = 77, seq: int = 0, tagged: bool = False, tcp: bool = False, age_ns: int = 0) -> bytes:
    """A VXLAN frame whose inner UDP (or TCP) payload starts with a signature of stream 0."""
    ts = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - age_ns) & 0xFFFFFFFF
    inner = Ether(src="02:00:00:00:09:01", dst="02:00:00:00:09:02")
    if tagged:
        inner = inner / Dot1Q(vlan=5)
    inner = inner / IP(src="198.18.5.1", dst="198.18.6.1") / (TCP(sport=1000, dport=80) if tcp else UDP(sport=1000, dport=80))
    pkt = (Ether(src="02:00:00:00:08:01", dst="02:00:00:00:08:02") / IP(src="198.19.1.1", dst="198.19.1.2") /
           UDP(sport=49152, dport=4789, chksum=0) / VXLAN(vni=vni) / inner /
           Raw(SIGNATURE.pack(SIGNATURE_MAGIC, 0, seq, ts) + b"\0" * 16))
    return bytes(pkt)


def inner_payload(frame: bytes) -> int:
    """Where scapy puts the inner L4 payload (the signature)."""
    return frame.index(SIGNATURE.pack(SIGNATURE_MAGIC, 0, 0, 0)[:4])


@pytest.mark.parametrize("tagged,tcp", [(False, False), (True, False), (False, True)])
def test_the_signature_finder_walks_a_declared_tunnel(tagged, tcp):
    frame = vxlan_frame(tagged=tagged, tcp=tcp)
    sig = inner_payload(frame)
    assert innermost_l4(frame, ToyVxlanGateway.encaps)[2] == sig
    assert stlgen.signature_room(frame, [], ToyVxlanGateway.encaps) == (sig, "")
    # undeclared, the tunnel is an opaque UDP payload: the signature would overwrite its header
    assert stlgen.signature_room(frame, [])[0] == 14 + 20 + 8


def test_declared_tunnels_keep_the_walk_through_gtpu_options_and_ipip():
    """The registry's tunnels are walked as the hand-written parsers did: GTP-U's optional fields and
    extension headers, IPIP inside it."""
    payload = Raw(SIGNATURE.pack(SIGNATURE_MAGIC, 0, 0, 0) + b"\0" * 8)
    inner = IP(src="198.18.0.1", dst="198.18.0.2") / UDP(sport=1, dport=2) / payload
    outer = Ether() / IP(src="198.19.0.1", dst="198.19.0.2") / UDP(sport=2152, dport=2152)
    plain = bytes(outer / GTP_U_Header(teid=5) / inner)
    ext = bytes(outer / GTP_U_Header(teid=5, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=9) / inner)
    nested = bytes(Ether() / IP(src="198.19.0.3", dst="198.19.0.4") / IP(bytes(IP() / UDP(sport=2152, dport=2152) /
                                                                         GTP_U_Header(teid=5) / inner)))
    for frame in (plain, ext, nested):
        assert innermost_l4(frame, dataplanes.encapsulations())[2] == inner_payload(frame)
    broken = bytearray(ext)
    broken[14 + 20 + 8 + 12] = 0  # an extension header of length 0
    assert innermost_l4(bytes(broken), dataplanes.encapsulations()) is None


def test_the_sink_counts_what_a_declared_tunnel_carries():
    frames = [vxlan_frame(seq=q, tagged=q % 2 == 1, age_ns=10_000) for q in range(6)]
    toy, default = Sink(capture_max=0, encaps=ToyVxlanGateway.encaps), Sink(capture_max=0)
    try:
        for sink in (toy, default):
            sink.reset(0)
            for f in frames:
                assert sink.program.test_run(f).verdict == "XDP_DROP"
        seen = toy.read()
        assert (seen.packets, seen.unsigned, seen.reordered) == (6, 0, 0)
        assert seen.latency_ns()["min"] >= 10_000
        assert default.read().unsigned == 6, "without the declaration the sink cannot see inside the tunnel"
    finally:
        toy.close()
        default.close()


def test_the_steering_program_hashes_the_declared_words():
    """Two DUT cores, only the first in the cpumap: a frame the program steers to the second one is
    aborted (no such entry), so the verdict says which core it chose; the Python twin agrees, frame
    by frame. Frames of one tunnel endpoint spread over both cores by their VNI."""
    cpus = [0, 1]
    obj = BpfObject(object_path("steer"), rodata=ToyVxlanGateway.steering.to_struct(cpus))
    try:
        obj.map("cpu_map").update(struct.pack("=I", 0), struct.pack("=Ii", 256, -1))
        prog = obj.program("xdp_steer")
        chosen = []
        for vni in range(64):
            frame = vxlan_frame(vni=vni)
            want = ToyVxlanGateway.steering.cpu_of(frame, cpus)
            assert prog.test_run(frame).verdict == ("XDP_REDIRECT" if want == 0 else "XDP_ABORTED"), vni
            chosen.append(want)
        assert 16 <= chosen.count(0) <= 48, "VNIs spread over both cores"
        plain = bytes(Ether() / IP(src="198.19.1.1", dst="198.18.7.7") / UDP(sport=1, dport=80) / Raw(b"\0" * 20))
        assert ToyVxlanGateway.steering.cpu_of(plain, cpus) == BY_DADDR.cpu_of(plain, cpus)
        assert prog.test_run(plain).verdict == ("XDP_REDIRECT" if BY_DADDR.cpu_of(plain, cpus) == 0 else "XDP_ABORTED")
    finally:
        obj.close()


def _old_key(name: str, frame: bytes) -> int:
    """The key bpf/steer.bpf.c hashed before dataplanes declared their words (enum steer_key)."""
    ip = 18 if frame[12:14] == b"\x81\x00" else 14
    saddr, daddr = struct.unpack_from("=II", frame, ip + 12)
    proto, l4 = frame[ip + 9], ip + (frame[ip] & 0xF) * 4
    if name == "pgwu":  # STEER_KEY_GTPU_TEID
        gtpu = proto == 17 and struct.unpack_from("!H", frame, l4 + 2)[0] == 2152
        return struct.unpack_from("=I", frame, l4 + 12)[0] if gtpu else daddr
    ports = struct.unpack_from("=I", frame, l4)[0] if proto in (6, 17) else 0  # STEER_KEY_FLOW
    return daddr ^ (saddr * 31 & 0xFFFFFFFF) ^ ports


@pytest.mark.parametrize("name,params", [("pgwu", {"direction": "ul"}), ("pgwu", {"direction": "dl"}),
                                         ("l4lb", {"vips": 4}), ("calib", {})])
def test_each_dataplane_is_steered_as_before_its_words_were_declared(name, params):
    dp = dataplanes.get(name)
    traffic = dp.traffic(128, 64, dp.validate(params))
    cpus = [0, 1]
    obj = BpfObject(object_path("steer"), rodata=dp.steering.to_struct(cpus))
    try:
        obj.map("cpu_map").update(struct.pack("=I", 0), struct.pack("=Ii", 256, -1))
        for flow in range(traffic.flows):
            frame = traffic.packet(flow)
            old = cpus[((_old_key(name, frame) * 2654435761) & 0xFFFFFFFF) * len(cpus) >> 32]
            assert dp.steering.cpu_of(frame, cpus) == old
            assert obj.program("xdp_steer").test_run(frame).verdict == ("XDP_REDIRECT" if old == 0 else "XDP_ABORTED")
    finally:
        obj.close()


@pytest.mark.parametrize("bad,field", [
    (dict(ip_proto=17, udp_dport=0), "udp_dport"),
    (dict(ip_proto=4, udp_dport=4789), "udp_dport"),
    (dict(ip_proto=17, udp_dport=4789, inner="ipv6"), "inner"),
    (dict(ip_proto=17, udp_dport=4789, header_len=8, opt_mask=1, opt_len=4, ext_mask=1, ext_type_offset=3),
     "ext_type_offset"),
])
def test_a_bad_declaration_names_the_field(bad, field):
    with pytest.raises(ConfigError, match=rf"^toy {field}: "):
        Encap("toy", **bad)


@pytest.mark.parametrize("name", dataplanes.names())
def test_a_labs_mac_addresses_reach_every_frame(name: str) -> None:
    """In a lab, frames carry the inventory's MAC addresses (``Traffic.on_ports``): offered ones are
    addressed to the DUT's ingress port, and the loaded program addresses its output to the tester."""
    from perfkit.dataplane import PortMacs
    from perfkit.netaddr import mac_bytes
    dp = dataplanes.get(name)
    macs = PortMacs(a="02:00:00:53:00:0a", b="02:00:00:53:00:0b", p0="02:00:00:53:01:00", p1="02:00:00:53:01:01")
    for value in dp.param(dp.variant).choices or [None]:
        params = dp.validate({dp.variant: value} if value is not None else {})
        traffic = dp.traffic(128, 2, params).on_ports(macs)
        egress = "b" if traffic.ingress == "a" else "a"
        src, dst = macs.into(traffic.ingress)
        frame = traffic.packet(1)
        assert frame[:12] == mac_bytes(dst) + mac_bytes(src), (name, value)
        if traffic.to_socket:  # for the DUT's kernel: nothing comes out
            continue
        out = traffic.expected_output(1)
        src, dst = macs.out_of(egress)
        assert out[:12] == mac_bytes(dst) + mac_bytes(src), (name, value)
        assert dp.check_output(traffic, out) is None
        dut = dp.load(traffic, 1, 2)
        try:
            assert dut.program.test_run(frame).data_out == out, (name, value)
        finally:
            dut.close()
