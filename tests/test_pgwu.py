"""The PGW-U XDP program in the real kernel (BPF_PROG_TEST_RUN), checked with scapy and against
the reference model ``perfkit.dataplanes.pgwu.model``."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from perfkit.errors import BpfError
from perfkit.dataplanes.pgwu.control import Pgwu, PgwuConfig, Session, SessionPlan
from perfkit.checksum import ones_sum
from perfkit.dataplanes.pgwu.model import emit
from perfkit.dataplanes.pgwu.traffic import S5_VLAN, SERVER_ADDR

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
    plan = SessionPlan(count=1_000_000, tagged=True)
    with Pgwu.load() as pg:
        assert pg.add_sessions(plan) == 1_000_000
        ul_keys = {struct.unpack("!I", k)[0] for k in pg.map("ul_sessions").keys()}
        assert ul_keys == {s.ul_teid for s in plan}
        assert sum(1 for _ in pg.map("dl_sessions").keys()) == 1_000_000
        for i in range(0, 1_000_000, 9973):  # contents, spread over the table
            s = plan.session(i)
            assert pg.ul_session(s.ul_teid)[:2] == (s.ue_addr, s.tenant_vlan)
            assert pg.dl_session(s.ue_addr, s.tenant_vlan)[:2] == (s.sgw_addr, s.dl_teid)
        # and the dataplane finds them too: the last session inserted forwards both ways
        last = plan.session(999_999)
        assert pg.program.test_run(bytes(ul_frame(last, inner_pkt(src=last.ue_addr)))).verdict == "XDP_REDIRECT"
        assert pg.program.test_run(bytes(dl_frame(last))).verdict == "XDP_REDIRECT"
