"""The PGW-U XDP program in the real kernel (BPF_PROG_TEST_RUN), checked with scapy and against
the reference model ``perfkit.dataplanes.pgwu.model``."""
from __future__ import annotations

import collections
import dataclasses
import os
import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from perfkit.errors import BpfError, ConfigError
from perfkit.dataplanes.pgwu import DATAPLANE
from perfkit.dataplanes.pgwu.control import (DL_TEID_BASE, SGW_BASE, TENANT_VLAN_BASE, UE_BASE, UL_TEID_BASE, Pgwu,
                                             PgwuConfig, Session, SessionPlan, session_columns)
from perfkit.checksum import ones_sum
from perfkit.dataplanes.pgwu.model import check_output, emit
from perfkit.dataplanes.pgwu.traffic import S5_VLAN, SERVER_ADDR, PgwuTraffic
from perfkit.stl.fieldengine import FieldEngine
from perfkit.stl.signature import SIGNATURE
from perfkit.layouts import gen_state
from perfkit.libbpf import num_possible_cpus
from perfkit.netaddr import int2ip, ip2int
from perfkit.testbed.bpfbuild import load_generator
from perfkit.testbed.livegen import compile_generator

CFG = PgwuConfig(s5_ifindex=7, sgi_ifindex=9)
SESSIONS = [
    Session(ul_teid=0x100, dl_teid=0x200, ue_addr="198.18.0.10", sgw_addr="198.19.254.1"),
    Session(ul_teid=0x101, dl_teid=0x201, ue_addr="198.18.0.11", sgw_addr="198.19.254.2", tenant_vlan=101),
]
UNTAGGED, TAGGED = SESSIONS


@pytest.fixture(scope="module")
def pgwu():
    with Pgwu.load(max_sessions=4096) as pg:
        pg.configure(CFG)
        pg.add_sessions(SESSIONS)
        yield pg


def run(pg: Pgwu, pkt, cfg: PgwuConfig = CFG):
    """Run one frame; returns (verdict, output, the counters that rose)."""
    if cfg != pg.config:
        pg.configure(cfg)
    before = pg.stats()
    res = pg.program.test_run(bytes(pkt))
    after = pg.stats()
    rose = {k: after[k].packets - before[k].packets for k in after if after[k].packets != before[k].packets}
    if cfg != CFG:
        pg.configure(CFG)
    return res.verdict, res.data_out, rose


def inner_pkt(src="198.18.0.10", dst=SERVER_ADDR, size=100, l4=None):
    hdr = IP(src=src, dst=dst, id=7, tos=0x28) / (l4 or UDP(sport=1234, dport=80))
    return IP(bytes(hdr / Raw(b"\xab" * (size - len(hdr)))))


def ul_frame(sess=UNTAGGED, inner=None, s5_vlan=0, gtp=None, gtpu_addr=CFG.gtpu_addr):
    inner = inner if inner is not None else inner_pkt(src=sess.ue_addr)
    l2 = Ether(src=CFG.s5_dst_mac, dst=CFG.s5_src_mac)
    if s5_vlan:
        l2 = l2 / Dot1Q(vlan=s5_vlan)
    gtp = gtp if gtp is not None else GTP_U_Header(teid=sess.ul_teid)
    return l2 / IP(src=sess.sgw_addr, dst=gtpu_addr) / UDP(sport=2152, dport=2152, chksum=0) / gtp / inner


def dl_frame(sess=UNTAGGED, inner=None):
    inner = inner if inner is not None else inner_pkt(src=SERVER_ADDR, dst=sess.ue_addr,
                                                      l4=TCP(sport=8080, dport=80))
    l2 = Ether(src=CFG.sgi_dst_mac, dst=CFG.sgi_src_mac)
    if sess.tenant_vlan:
        l2 = l2 / Dot1Q(vlan=sess.tenant_vlan)
    return l2 / inner


# -- uplink ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("sess", [UNTAGGED, TAGGED], ids=["untagged", "tenant-vlan"])
@pytest.mark.parametrize("s5_vlan", [0, S5_VLAN], ids=["s5-untagged", "s5-dot1q"])
@pytest.mark.parametrize("gtp_kind", ["plain", "seq", "ext", "seq+ext"])
def test_ul_decap_gives_the_inner_packet(pgwu, sess, s5_vlan, gtp_kind):
    inner = inner_pkt(src=sess.ue_addr)
    gtp = GTP_U_Header(teid=sess.ul_teid)
    if "seq" in gtp_kind:
        gtp.S, gtp.seq = 1, 4711
    if "ext" in gtp_kind:
        gtp.E, gtp.next_ex = 1, 0x85
        gtp = gtp / GTPPDUSessionContainer(type=1, QFI=5)
    verdict, out, rose = run(pgwu, ul_frame(sess, inner, s5_vlan, gtp))
    assert verdict == "XDP_REDIRECT"
    assert rose == {"ul_fwd": 1}
    eth = Ether(out)
    assert (eth.dst, eth.src) == (CFG.sgi_dst_mac, CFG.sgi_src_mac)
    if sess.tenant_vlan:
        assert eth[Dot1Q].vlan == sess.tenant_vlan and eth[Dot1Q].type == 0x0800
        assert len(out) == 18 + len(inner)
    else:
        assert Dot1Q not in eth and eth.type == 0x0800 and len(out) == 14 + len(inner)
    assert bytes(eth[IP]) == bytes(inner)  # the inner packet, untouched
    assert GTP_U_Header not in eth


def test_ul_counts_per_session_and_uses_xdp_tx_when_configured(pgwu):
    before = pgwu.ul_session(UNTAGGED.ul_teid)[2]
    inner = inner_pkt(size=300)
    verdict, _, _ = run(pgwu, ul_frame(inner=inner), PgwuConfig(s5_ifindex=7, sgi_ifindex=9, xdp_tx=True))
    after = pgwu.ul_session(UNTAGGED.ul_teid)[2]
    assert verdict == "XDP_TX"
    assert (after.packets - before.packets, after.bytes - before.bytes) == (1, 300)


def test_ul_strips_ethernet_padding(pgwu):
    inner = inner_pkt(size=28)
    verdict, out, _ = run(pgwu, bytes(ul_frame(inner=inner)) + b"\0" * 10)
    assert verdict == "XDP_REDIRECT"
    assert out[14:] == bytes(inner)


def test_dl_strips_ethernet_padding(pgwu):
    inner = inner_pkt(src=SERVER_ADDR, dst=UNTAGGED.ue_addr, size=28)
    verdict, out, _ = run(pgwu, bytes(dl_frame(UNTAGGED, inner)) + b"\0" * 18)
    assert verdict == "XDP_REDIRECT"
    assert out[14 + 36:] == bytes(inner) and Ether(out)[GTP_U_Header].length == 28


# -- downlink --------------------------------------------------------------------------------------
@pytest.mark.parametrize("udp_csum", [False, True], ids=["csum-off", "csum-on"])
@pytest.mark.parametrize("sess,s5_vlan", [(UNTAGGED, 0), (TAGGED, S5_VLAN)], ids=["untagged", "dot1q"])
@pytest.mark.parametrize("size", [46, 100, 1410, 3000])
def test_dl_encap_gives_gtpu_with_session_teid(pgwu, udp_csum, sess, s5_vlan, size):
    cfg = PgwuConfig(s5_ifindex=7, sgi_ifindex=9, udp_csum=udp_csum, s5_vlan=s5_vlan)
    inner = inner_pkt(src=SERVER_ADDR, dst=sess.ue_addr, size=size, l4=TCP(sport=8080, dport=80))
    verdict, out, rose = run(pgwu, dl_frame(sess, inner), cfg)
    assert verdict == "XDP_REDIRECT" and rose == {"dl_fwd": 1}
    eth = Ether(out)
    assert (eth.dst, eth.src) == (CFG.s5_dst_mac, CFG.s5_src_mac)
    if s5_vlan:
        assert eth[Dot1Q].vlan == s5_vlan
    outer = eth[IP]
    assert (outer.src, outer.dst) == (CFG.gtpu_addr, sess.sgw_addr)
    assert outer.len == size + 36 and outer.ttl == 64 and outer.tos == 0x28 and outer.ihl == 5
    ip_hdr = bytes(outer)[:20]
    assert ones_sum(ip_hdr) == 0xFFFF  # header checksum verifies
    udp = eth[UDP]
    assert (udp.sport, udp.dport, udp.len) == (2152, 2152, size + 16)
    gtp = eth[GTP_U_Header]
    assert (gtp.version, gtp.PT, gtp.gtp_type, gtp.teid, gtp.length) == (1, 1, 255, sess.dl_teid, size)
    assert (gtp.E, gtp.S, gtp.PN) == (0, 0, 0)
    assert bytes(gtp.payload) == bytes(inner)
    if udp_csum:
        rebuilt = IP(src=outer.src, dst=outer.dst) / UDP(sport=2152, dport=2152) / bytes(udp.payload)
        assert udp.chksum != 0 and udp.chksum == IP(bytes(rebuilt))[UDP].chksum  # scapy's own sum
    else:
        assert udp.chksum == 0


def test_dl_ipv4_and_udp_checksums_verify_as_whole_packets(pgwu):
    """Independent check: the one's-complement sum over header / pseudo-header must be 0xffff."""
    cfg = PgwuConfig(s5_ifindex=7, sgi_ifindex=9, udp_csum=True)
    for size in (46, 47, 333, 1424):  # odd sizes exercise the last-byte path
        inner = inner_pkt(src=SERVER_ADDR, dst=UNTAGGED.ue_addr, size=size)
        _, out, _ = run(pgwu, dl_frame(UNTAGGED, inner), cfg)
        ip = out[14:34]
        assert ones_sum(ip) == 0xFFFF
        udp = out[34:]
        pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, len(udp))
        assert ones_sum(pseudo + udp) == 0xFFFF



def test_dl_counts_per_session(pgwu):
    before = pgwu.dl_session(TAGGED.ue_addr, TAGGED.tenant_vlan)[2]
    for _ in range(3):
        run(pgwu, dl_frame(TAGGED, inner_pkt(src=SERVER_ADDR, dst=TAGGED.ue_addr, size=200)))
    after = pgwu.dl_session(TAGGED.ue_addr, TAGGED.tenant_vlan)[2]
    assert (after.packets - before.packets, after.bytes - before.bytes) == (3, 600)


# -- not for the dataplane -------------------------------------------------------------------------
NOT_FOR_US = {
    "arp": Ether() / ARP(pdst="198.19.255.5"),
    "icmp-to-host": Ether() / IP(src=SERVER_ADDR, dst=CFG.sgi_addr) / ICMP(),
    "icmp-to-gtpu-addr": Ether() / IP(src="198.19.254.1", dst=CFG.gtpu_addr) / ICMP(),
    "other-udp-to-host": Ether() / IP(src=SERVER_ADDR, dst=CFG.sgi_addr) / UDP(dport=53) / Raw(b"q" * 20),
    "other-udp-to-gtpu-addr": Ether() / IP(dst=CFG.gtpu_addr) / UDP(sport=2152, dport=2123) / Raw(b"x" * 8),
    "ipv6": Ether() / IPv6(dst="2001:2::1") / UDP(),
    "gtp-echo-request": Ether() / IP(src="198.19.254.1", dst=CFG.gtpu_addr) / UDP(sport=2152, dport=2152)
    / GTP_U_Header(gtp_type=1, teid=0, S=1, seq=1),
}


@pytest.mark.parametrize("name", NOT_FOR_US)
def test_host_traffic_passes(pgwu, name):
    verdict, _, rose = run(pgwu, NOT_FOR_US[name])
    assert verdict == "XDP_PASS" and rose == {"pass": 1}


# -- malformations: each dropped and counted under its own reason -----------------------------------
def _set(frame, offset, value: bytes):
    b = bytearray(bytes(frame))
    b[offset:offset + len(value)] = value
    return b


GOOD_UL = ul_frame()
MALFORMED = {
    "drop_bad_header": _set(GOOD_UL, 14, b"\x44"),                        # IHL 4
    "drop_truncated": bytes(GOOD_UL)[:40],                                 # cut inside UDP
    "drop_fragment": _set(GOOD_UL, 20, b"\x20\x00"),                      # MF set
    "drop_gtp_version": _set(GOOD_UL, 42, b"\x50"),                       # GTP version 2
    "drop_gtp_ext": bytes(ul_frame(gtp=GTP_U_Header(teid=UNTAGGED.ul_teid, gtp_type=255, E=1, next_ex=0x85)
                                   / Raw(b"\x00\x00\x00\x00"))),           # ext length 0
    "drop_unknown_teid": bytes(ul_frame(gtp=GTP_U_Header(teid=0xDEAD))),
    "drop_ue_mismatch": bytes(ul_frame(inner=inner_pkt(src="198.18.0.99"))),
    "drop_inner_not_ipv4": bytes(ul_frame(inner=IPv6(src="2001:2::1", dst="2001:2::2") / UDP())),
    "drop_inner_truncated": _set(GOOD_UL, 50 + 2, struct.pack("!H", 400)),  # inner length too big
    "drop_dl_no_session": bytes(dl_frame(inner=inner_pkt(src=SERVER_ADDR, dst="198.18.7.7"))),
}


@pytest.mark.parametrize("reason", MALFORMED)
def test_each_malformation_dropped_under_its_reason(pgwu, reason):
    verdict, _, rose = run(pgwu, bytes(MALFORMED[reason]))
    assert verdict == "XDP_DROP"
    assert rose == {reason: 1}


def test_dl_too_big_for_s5_mtu_dropped(pgwu):
    cfg = PgwuConfig(s5_ifindex=7, sgi_ifindex=9, s5_mtu=1500)
    ok = dl_frame(UNTAGGED, inner_pkt(src=SERVER_ADDR, dst=UNTAGGED.ue_addr, size=1464))
    big = dl_frame(UNTAGGED, inner_pkt(src=SERVER_ADDR, dst=UNTAGGED.ue_addr, size=1465))
    assert run(pgwu, ok, cfg)[0] == "XDP_REDIRECT"
    verdict, _, rose = run(pgwu, big, cfg)
    assert verdict == "XDP_DROP" and rose == {"drop_too_big": 1}


def test_dl_tenant_vlan_selects_the_session(pgwu):
    """The same UE address in another tenant (VLAN) is another session, here: none."""
    wrong = Ether() / Dot1Q(vlan=999) / inner_pkt(src=SERVER_ADDR, dst=TAGGED.ue_addr)
    assert run(pgwu, wrong)[2] == {"drop_dl_no_session": 1}


# -- truncations and random bytes ------------------------------------------------------------------
def check_against_model(pg: Pgwu, frame: bytes) -> str:
    """Run ``frame``; the verdict must be legal and any forwarded frame exactly the model's."""
    try:
        res = pg.program.test_run(frame)
    except BpfError as err:
        assert len(frame) < 14 and err.errno_ == 22  # the kernel refuses frames shorter than Ethernet
        return "refused"
    assert res.verdict in ("XDP_PASS", "XDP_DROP", "XDP_REDIRECT", "XDP_TX")
    want = emit(frame, pg.config, SESSIONS)
    assert res.verdict == want.verdict, want.stat
    if res.verdict in ("XDP_REDIRECT", "XDP_TX"):
        assert res.data_out == want.out
    return res.verdict


@pytest.mark.parametrize("frame", [
    ul_frame(), ul_frame(TAGGED, s5_vlan=S5_VLAN),
    ul_frame(gtp=GTP_U_Header(teid=UNTAGGED.ul_teid, E=1, S=1, next_ex=0x85) / GTPPDUSessionContainer(QFI=1)),
    dl_frame(), dl_frame(TAGGED),
], ids=["ul", "ul-dot1q", "ul-ext", "dl", "dl-dot1q"])
def test_every_truncation_gets_a_legal_verdict_never_a_corrupt_forward(pgwu, frame):
    full = bytes(frame)
    verdicts = [check_against_model(pgwu, full[:n]) for n in range(len(full) + 1)]
    assert verdicts[-1] == "XDP_REDIRECT"
    assert all(v in ("refused", "XDP_DROP", "XDP_PASS") for v in verdicts[:-1])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=14, max_size=300))
def test_random_bytes_never_abort_or_forward(pgwu, data):
    res = pgwu.program.test_run(data)
    assert res.verdict in ("XDP_PASS", "XDP_DROP")


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from([bytes(ul_frame()), bytes(ul_frame(TAGGED, s5_vlan=S5_VLAN)),
                             bytes(ul_frame(gtp=GTP_U_Header(teid=UNTAGGED.ul_teid, E=1, S=1, next_ex=0x85)
                                            / GTPPDUSessionContainer(QFI=1))),
                             bytes(dl_frame()), bytes(dl_frame(TAGGED))]),
       edits=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 40), udp_csum=st.booleans())
def test_mutated_packets_match_the_reference_model(pgwu, base, edits, cut, udp_csum):
    """Structure-aware fuzzing: valid frames with a few bytes changed and the tail cut."""
    frame = bytearray(base)
    for off, val in edits:
        if off < len(frame):
            frame[off] = val
    frame = bytes(frame[:max(14, len(frame) - cut)])
    pgwu.configure(PgwuConfig(s5_ifindex=7, sgi_ifindex=9, udp_csum=udp_csum))
    try:
        check_against_model(pgwu, frame)
    finally:
        pgwu.configure(CFG)


# -- scale -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_one_million_sessions_all_found():
    """Seed 001's table (1000 tenants x 1001 UEs) installs (vectorised, batched) and is all there."""
    plan = SEED_PLAN
    with Pgwu.load(max_sessions=plan.count) as pg:
        assert pg.add_sessions(plan) == plan.count  # ~5 s on a 2-core VM
        ul_keys = np.frombuffer(b"".join(pg.map("ul_sessions").keys()), dtype=">u4")
        assert np.array_equal(np.sort(ul_keys), np.sort(session_columns(plan)["ul_teid"]))
        assert sum(1 for _ in pg.map("dl_sessions").keys()) == plan.count
        for i in range(0, plan.count, 9973):  # contents, spread over the table
            s = plan.session(i)
            assert pg.ul_session(s.ul_teid)[:2] == (s.ue_addr, s.tenant_vlan)
            assert pg.dl_session(s.ue_addr, s.tenant_vlan)[:2] == (s.sgw_addr, s.dl_teid)
        # and the dataplane finds them too: the last session inserted forwards both ways
        last = plan.session(plan.count - 1)
        assert pg.program.test_run(bytes(ul_frame(last, inner_pkt(src=last.ue_addr)))).verdict == "XDP_REDIRECT"
        assert pg.program.test_run(bytes(dl_frame(last))).verdict == "XDP_REDIRECT"


# -- several tenants: the (UE, tenant) grid the generator walks --------------------------------------
# Session i is UE i mod U of tenant i mod T (U, T coprime); the generator steps two variables
# together, one wrapping at U and one at T, and writes each field from one of them.
def engine_values(engine: FieldEngine, k: int) -> list[int]:
    """The variables' values for the k-th packet of an inc/dec walk, as gen.bpf.c's var_next gives them."""
    out = []
    for v in engine.vars:
        span = v.max - v.min + 1
        off = k * v.step % span
        out.append(v.max - off if v.op == "dec" else v.min + off)
    return out


def engine_frame(engine: FieldEngine, template: bytes, values: list[int]) -> bytes:
    """What the field engine makes of ``template`` with these variable values: each write's var + add
    big-endian, the checksums it touches fixed up incrementally (RFC 1624), as gen.bpf.c does."""
    f = bytearray(template)
    acc = [0] * len(engine.csum_offsets)
    for w in engine.writes:
        old = struct.unpack_from(f"!{w.size // 2}H", f, w.offset)
        f[w.offset:w.offset + w.size] = ((values[w.var] + w.add) & ((1 << 8 * w.size) - 1)).to_bytes(w.size, "big")
        new = struct.unpack_from(f"!{w.size // 2}H", f, w.offset)
        for c in range(len(acc)):
            if w.csum_mask >> c & 1:
                acc[c] += sum(~x & 0xFFFF for x in old) + sum(new)
    for c, off in enumerate(engine.csum_offsets):
        s = (~struct.unpack_from("!H", f, off)[0] & 0xFFFF) + acc[c]
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        struct.pack_into("!H", f, off, ~s & 0xFFFF)
    return bytes(f)


def grid_traffic(direction: str, plan: SessionPlan, l4: str = "udp", frame_size: int = 128) -> PgwuTraffic:
    return PgwuTraffic(direction=direction, frame_size=frame_size, flows=plan.count, plan=plan, vlan=True,
                       inner_l4=l4, config=PgwuConfig(s5_vlan=S5_VLAN))


SEED_PLAN = SessionPlan(1_001_000, tagged=True)  # seed 001: 1000 tenant VLANs x 1001 UE addresses


def distinct(values: np.ndarray) -> int:
    return int(np.count_nonzero(np.diff(np.sort(values)))) + 1


def test_seed_plan_is_1000_tenants_of_1001_ues():
    assert (SEED_PLAN.tenant_count, SEED_PLAN.ue_count, SEED_PLAN.full) == (1000, 1001, True)
    cols = session_columns(SEED_PLAN)
    assert distinct(cols["ul_teid"]) == distinct(cols["dl_teid"]) == 1_001_000
    assert distinct(cols["ue_addr"] << 12 | cols["tenant_vlan"]) == 1_001_000  # the DL key
    assert (cols["tenant_vlan"].min(), cols["tenant_vlan"].max()) == (TENANT_VLAN_BASE, TENANT_VLAN_BASE + 999)
    assert distinct(cols["tenant_vlan"]) == 1000 and distinct(cols["sgw_addr"]) == 100


@pytest.mark.parametrize("ues,tenants", [(1, 2), (7, 5), (3, 8), (13, 12), (101, 100)])
@pytest.mark.parametrize("op", ["inc", "dec"])
def test_the_walk_visits_every_session_exactly_once(ues, tenants, op):
    plan = SessionPlan(ues * tenants, tenants=tenants, tagged=True)
    assert (plan.ue_count, plan.tenant_count, plan.full) == (ues, tenants, True)
    engine = grid_traffic("dl", plan).field_engine(op)
    n = plan.count
    seen = [plan.index(*engine_values(engine, k)) for k in range(n)]
    assert sorted(seen) == list(range(n))  # every session, once
    assert seen == [k if op == "inc" else n - 1 - k for k in range(n)]  # packet k is flow k (dec: backwards)
    assert plan.index(*engine_values(engine, n)) == seen[0]  # and again from the start


def test_random_walk_only_meets_sessions():
    """flow_op random draws each variable on its own: every (UE, tenant) pair of a full grid is a session."""
    plan = SessionPlan(7 * 5, tenants=5, tagged=True)
    engine = grid_traffic("ul", plan).field_engine("random")
    (u, t) = engine.vars
    assert all(plan.index(a, b) is not None for a in range(u.min, u.max + 1) for b in range(t.min, t.max + 1))


@pytest.mark.parametrize("plan", [SessionPlan(7 * 5, tenants=5, tagged=True), SessionPlan(80, tenants=12, tagged=True),
                                  SEED_PLAN], ids=["7x5", "80-of-7x12", "seed"])
def test_session_columns_and_lookups_agree_with_each_session(plan):
    cols = session_columns(plan)
    for i in sorted({0, 1, plan.ue_count - 1, plan.ue_count, plan.tenant_count, plan.count - 1, plan.count // 3}):
        s = plan.session(i)
        assert (cols["ul_teid"][i], cols["dl_teid"][i], int2ip(int(cols["ue_addr"][i])),
                int2ip(int(cols["sgw_addr"][i])), cols["tenant_vlan"][i]) == (
                    s.ul_teid, s.dl_teid, s.ue_addr, s.sgw_addr, s.tenant_vlan)
        assert plan.by_ul_teid(s.ul_teid) == plan.by_dl_teid(s.dl_teid) == plan.by_dl_key(s.ue_addr, s.tenant_vlan) == s
        assert s.ul_teid - UL_TEID_BASE == s.dl_teid - DL_TEID_BASE == (s.tenant_vlan - TENANT_VLAN_BASE) << 16 | (
            ip2int(s.ue_addr) - UE_BASE)
    assert plan.by_dl_key(plan.session(0).ue_addr, TENANT_VLAN_BASE + plan.tenant_count) is None
    assert plan.by_ul_teid(UL_TEID_BASE + (1 << 16) * plan.tenant_count) is None


@pytest.mark.parametrize("count", [1, 5, 1024, 130_560])
@pytest.mark.parametrize("tagged", [False, True])
def test_one_tenant_keeps_the_old_layout(count, tagged):
    """Up to UE_POOL sessions: session i = UE i, TEIDs base + i, as before several tenants existed."""
    plan = SessionPlan(count, tagged=tagged)
    assert plan.tenant_count == 1 and plan.ue_count == count
    for i in {0, count // 2, count - 1}:
        assert plan.session(i) == Session(ul_teid=UL_TEID_BASE + i, dl_teid=DL_TEID_BASE + i,
                                          ue_addr=int2ip(UE_BASE + i), sgw_addr=int2ip(SGW_BASE + i % 100),
                                          tenant_vlan=TENANT_VLAN_BASE if tagged else 0)
    if count > 1:
        engine = PgwuTraffic(direction="ul", flows=count, plan=plan, vlan=tagged).field_engine()
        assert len(engine.vars) == 1 and engine.vars[0].max == count - 1
        assert [w.name for w in engine.writes] == ["gtp.teid", "inner.src", "inner.sport"]


@pytest.mark.parametrize("direction,l4", [("ul", "udp"), ("ul", "tcp"), ("dl", "udp"), ("dl", "tcp")])
def test_engine_frames_are_the_profile_packets_at_the_wrap_points(direction, l4):
    """The field engine's frame for flow f is packet(f) (uplink: from the GTP header on; the outer
    source stays flow 0's SGW), for the seed plan's wrap points and a random sample."""
    traffic = grid_traffic(direction, SEED_PLAN, l4)
    engine, template = traffic.field_engine(), traffic.packet(0)
    keep = traffic.offsets()["gtp"] if direction == "ul" else 0
    u, t, n = SEED_PLAN.ue_count, SEED_PLAN.tenant_count, SEED_PLAN.count
    flows = {0, 1, t - 1, t, t + 1, u - 1, u, u + 1, 2 * t, 2 * u, u * (t - 1), n - u, n - t, n - 2, n - 1}
    flows |= set(random.Random(1).sample(range(n), 20))
    for f in sorted(flows):
        got = engine_frame(engine, template, engine_values(engine, f))
        assert got[keep:] == traffic.packet(f)[keep:], f"flow {f}"


@pytest.fixture
def one_cpu():
    """The generator keeps per-CPU state: run it on one CPU."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})
    yield
    os.sched_setaffinity(0, old)


@pytest.mark.parametrize("direction,l4", [("ul", "udp"), ("dl", "tcp")])
def test_the_generator_program_sends_the_profile_packets(one_cpu, direction, l4):
    """gen.bpf.c, compiled for the seed plan, sends packet(f) for flows across both variables' wraps,
    and (started near the end) across the grid's end back to flow 0."""
    traffic = grid_traffic(direction, SEED_PLAN, l4)
    keep = traffic.offsets()["gtp"] if direction == "ul" else 0
    sig = traffic.offsets()["signature"]
    u, t, n = SEED_PLAN.ue_count, SEED_PLAN.tenant_count, SEED_PLAN.count
    template = traffic.packet(0)
    with load_generator(compile_generator(traffic), 1) as gen:
        for first, count in ((0, 2 * u + 2), (n - 3, 6)):
            state = gen_state()
            state.var_pos[0], state.var_pos[1] = first % u, first % t
            gen.map("gen_state").update(struct.pack("=I", 0), bytes(state) * num_possible_cpus())
            for k in range(count):
                out = gen.program("xdp_gen").test_run(template).data_out
                f = (first + k) % n
                if k < 4 or f % t in (0, 1, t - 1) or f % u in (0, 1, u - 1):  # and the end: n - 3 .. 2
                    _, stream, seq, ts = SIGNATURE.unpack_from(out, sig)
                    assert out[keep:] == traffic.packet(f, seq, stream, ts)[keep:], f"flow {f}"


GRID_CFG = PgwuConfig(s5_ifindex=7, sgi_ifindex=9, s5_vlan=S5_VLAN)


@pytest.mark.parametrize("plan", [SessionPlan(13 * 12, tenants=12, tagged=True),
                                  SessionPlan(150, tenants=12, tagged=True)], ids=["13x12", "150-of-13x12"])
@pytest.mark.parametrize("direction,l4", [("ul", "udp"), ("ul", "tcp"), ("dl", "udp"), ("dl", "tcp")])
def test_kernel_forwards_every_grid_flow_as_the_model_says(plan, direction, l4):
    """Every (UE, tenant) pair of the grid through the real program: what the model forwards (a session)
    the kernel forwards byte for byte, what it drops (no session: the grid's empty cells) it drops."""
    full = SessionPlan(plan.ue_count * plan.tenant_count, tenants=plan.tenant_count, tagged=True)
    traffic = grid_traffic(direction, full, l4)  # frames for every cell, installed sessions from ``plan``
    engine, template = traffic.field_engine(), traffic.packet(0)
    verdicts = collections.Counter()
    with Pgwu.load(max_sessions=4096) as pg:
        pg.configure(GRID_CFG)
        assert pg.add_sessions(plan) == plan.count
        for f in range(full.count):
            frame = engine_frame(engine, template, engine_values(engine, f))
            want = emit(frame, GRID_CFG, plan)
            res = pg.program.test_run(frame)
            assert (res.verdict, want.stat) == (want.verdict, ("ul_fwd" if direction == "ul" else "dl_fwd")
                                                if f < plan.count else "drop_unknown_teid" if direction == "ul"
                                                else "drop_dl_no_session"), f"flow {f}"
            if want.out is not None:
                assert res.data_out == want.out, f"flow {f}"
                assert check_output(res.data_out, direction, GRID_CFG, plan) is None
            verdicts[res.verdict] += 1
    assert verdicts == {"XDP_REDIRECT": plan.count, **({"XDP_DROP": full.count - plan.count} if full.count > plan.count
                                                       else {})}


@pytest.mark.parametrize("make,field,allowed", [
    (lambda: PgwuTraffic(flows=1_000_000, plan=SessionPlan(1_000_000, tagged=True), vlan=True), "sessions",
     "999000 or 1001000"),
    (lambda: PgwuTraffic(direction="dl", flows=1024, plan=SEED_PLAN, vlan=True), "flows",
     "1 or every session (1001000)"),
    (lambda: DATAPLANE.traffic(64, 200_000, {"direction": "ul", "sessions": 0, "udp_csum": False, "vlan": True}),
     "sessions", "199000 or 201000"),
    (lambda: SessionPlan(200_000), "sessions", "at most 130560 untagged"),
    (lambda: SessionPlan(10, tenants=3), "tenants", "1 when untagged"),
    (lambda: SessionPlan(10, tenants=20, tagged=True), "tenants", "1 .. sessions (10)"),
    (lambda: SessionPlan(4000, tenants=4000, tagged=True), "tenants", "1 .. 3994"),
    (lambda: SessionPlan(3_000_000, tenants=40, tagged=True), "sessions", "at most 65536 UE addresses per tenant"),
], ids=["not-a-grid", "part-of-the-grid", "dataplane-params", "untagged", "untagged-tenants",
        "more-tenants-than-sessions", "vlan-ids", "teid-low-half"])
def test_bad_combinations_are_refused_naming_the_field(make, field, allowed):
    with pytest.raises(ConfigError) as err:
        make()
    assert err.value.field == field and allowed in err.value.allowed


def test_one_flow_over_many_tenants_needs_no_grid():
    """prog-bench and single-flow trials: any session count (here not a full grid) is fine."""
    plan = SessionPlan(1_000_000, tagged=True)
    assert not plan.full and plan.tenant_count == 1000
    traffic = PgwuTraffic(direction="dl", flows=1, plan=plan, vlan=True)
    assert traffic.field_engine().writes == ()


# -- session-table designs (the session_table build option) ---------------------------------------
@pytest.mark.parametrize("table", ["hash", "percpu_hash", "lru_percpu_hash", "teid_array"])
def test_every_session_table_design_finds_its_sessions_and_no_others(table):
    """Each design is a build of the same program: sessions are found both ways, read back from the
    kernel, and a TEID never allocated (in range, out of a slot's range, below the base) is unknown."""
    plan = SessionPlan(3003, tenants=3, tagged=True)    # 3 tenants x 1001 UEs: TEID blocks of 1001 slots
    # an LRU table full to the brim evicts (the next test): room for twice the sessions here
    size = plan.teid_slots if table == "teid_array" else plan.count * (2 if table.startswith("lru") else 1)
    with Pgwu.load(max_sessions=size, table=table) as pg:
        pg.configure(dataclasses.replace(CFG, teid_stride=plan.teid_stride))
        assert pg.add_sessions(plan) == plan.count
        assert pg.session_count() == (plan.count, plan.count)
        for i in (0, 1, 1500, plan.count - 1):
            s = plan.session(i)
            frame = bytes(ul_frame(s, inner_pkt(src=s.ue_addr)))
            assert pg.program.test_run(frame).verdict == "XDP_REDIRECT"
            assert emit(frame, pg.config, plan).verdict == "XDP_REDIRECT"
            assert pg.ul_session(s.ul_teid)[0] == s.ue_addr and pg.ul_session(s.ul_teid)[2].packets == 1
            assert pg.program.test_run(bytes(dl_frame(s))).verdict == "XDP_REDIRECT"
        s = plan.session(7)
        for teid in (UL_TEID_BASE + (1 << 16) + 1001, UL_TEID_BASE + (3 << 16) + 1, UL_TEID_BASE - 1):
            bad = bytes(ul_frame(dataclasses.replace(s, ul_teid=teid), inner_pkt(src=s.ue_addr)))
            assert pg.program.test_run(bad).verdict == "XDP_DROP"
            assert emit(bad, pg.config, plan).stat == "drop_unknown_teid"
            assert pg.ul_session(teid) is None
        assert pg.stats()["drop_unknown_teid"].packets == 3


def test_an_lru_table_evicts_live_sessions_before_it_is_full_and_percpu_hash_keeps_them_all():
    """Seed 001's finding, read back from the kernel: sessions installed into a table of as many
    entries. An LRU map keeps free entries on per-CPU lists and evicts once its own CPU's run out."""
    plan = SessionPlan(20_000)
    kept = {}
    for table in ("lru_percpu_hash", "percpu_hash"):
        with Pgwu.load(max_sessions=plan.count, table=table) as pg:
            pg.add_sessions(plan)
            kept[table] = pg.session_count()
    assert kept["percpu_hash"] == (plan.count, plan.count)
    assert max(kept["lru_percpu_hash"]) < plan.count


def test_a_session_table_design_is_a_scenario_parameter_and_a_knob():
    from perfkit.scenario import Scenario

    sc = Scenario("pgwu", params={"session_table": "teid_array"})
    assert sc.key.endswith("-teidarray") and sc.traffic().session_table == "teid_array"
    with pytest.raises(ConfigError) as err:
        Scenario("pgwu", params={"session_table": "btree"})
    assert err.value.field == "session_table"


@pytest.mark.parametrize("vlan", [False])
def test_host_traffic_is_checksummed_udp_to_our_address_that_the_program_passes_to_the_kernel(vlan):
    """``direction=host``: UDP to the PGW-U's GTP-U address on another port than 2152, whose real UDP
    checksum (GRO aggregates no datagram without one) the field engine keeps right for every flow;
    the program passes every such frame to the kernel, and the traffic says which socket gets it."""
    params = {"direction": "host", "sessions": 0, "udp_csum": False, "vlan": vlan, "session_table": "hash"}
    traffic = DATAPLANE.traffic(128, 16, params)
    assert traffic.ingress == "a" and traffic.to_socket == (traffic.config.gtpu_addr, 9)
    assert DATAPLANE.forwarding(traffic) == {"pass"}
    engine, template = traffic.field_engine(), traffic.packet(0)
    with Pgwu.load(max_sessions=1024) as pg:
        pg.configure(traffic.config)
        for f in range(16):
            frame = engine_frame(engine, template, engine_values(engine, f))
            assert frame == traffic.packet(f), f"flow {f}"
            ip = Ether(frame)[IP]
            udp = ip[UDP]
            assert (ip.dst, udp.dport, udp.sport) == (traffic.config.gtpu_addr, 9, 10000 + f)
            assert udp.chksum != 0
            raw = bytes(ip)
            pseudo = raw[12:20] + struct.pack("!BBH", 0, 17, len(raw) - 20)
            assert ones_sum(pseudo + raw[20:]) == 0xFFFF, f"flow {f}: the UDP checksum does not verify"
            res = pg.program.test_run(frame)
            assert res.verdict == "XDP_PASS"
        assert pg.stats()["pass"].packets == 16


def test_host_traffic_has_no_kernel_timed_figure_and_forwarded_host_traffic_is_a_mismatch():
    params = {"direction": "host", "sessions": 0, "udp_csum": False, "vlan": False, "session_table": "hash"}
    with pytest.raises(ConfigError, match="^direction: "):
        DATAPLANE.bench_spec(64, params)
    traffic = DATAPLANE.traffic(64, 1, params)
    assert "passed to its kernel" in DATAPLANE.check_output(traffic, traffic.packet(0))


@pytest.mark.parametrize("params", [{"vlan": True}, {"sessions": 200_000}], ids=["vlan", "tenants"])
def test_host_traffic_is_untagged_because_the_kernel_has_no_vlan_port(params):
    base = {"direction": "host", "sessions": 0, "udp_csum": False, "vlan": False, "session_table": "hash"}
    with pytest.raises(ConfigError, match="^vlan: "):
        DATAPLANE.traffic(64, 1, {**base, **params, "vlan": True})
