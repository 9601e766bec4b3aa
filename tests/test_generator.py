"""The generator program (bpf/gen.bpf.c) in the real kernel: BPF_PROG_TEST_RUN without live frames
shows the frame it builds. Flow i must be the profile's packet(i); checksums must verify."""
from __future__ import annotations

import os
import struct

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from perfkit.errors import ConfigError
from perfkit.layouts import GEN_MAX_STREAMS
from perfkit.libbpf import BpfObject
from perfkit.livegen import build_config, stream_plan
from perfkit.pgwu import BUILD_DIR, SessionPlan
from perfkit.pgwu_model import ones_sum
from perfkit.profiles import SIGNATURE, SIGNATURE_MAGIC, TrafficProfile


@pytest.fixture(autouse=True)
def one_cpu():
    """Per-CPU generator state: keep every run on one CPU."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})
    yield min(old)
    os.sched_setaffinity(0, old)


def load(profile: TrafficProfile, flow_op: str = "inc", stream_base: int = 0, stream_mask: int = 0) -> BpfObject:
    obj = BpfObject(BUILD_DIR / "gen.o", rodata=build_config(profile.packet(0), profile.field_engine(flow_op), 1))
    from perfkit.layouts import gen_state
    from perfkit.libbpf import num_possible_cpus

    obj.map("gen_state").update(struct.pack("=I", 0), bytes(gen_state(stream_base=stream_base, stream_mask=stream_mask))
                                * num_possible_cpus())
    return obj


def run(obj: BpfObject, frame: bytes) -> bytes:
    res = obj.program("xdp_gen").test_run(frame)
    assert res.verdict == "XDP_REDIRECT"
    return res.data_out



def unsign(profile: TrafficProfile, frame: bytes) -> tuple[bytes, tuple]:
    """The frame with its signature zeroed like the template's, and the signature fields."""
    off = profile.offsets()["signature"]
    sig = SIGNATURE.unpack_from(frame, off)
    blank = SIGNATURE.pack(SIGNATURE_MAGIC, 0, 0, 0)
    return frame[:off] + blank + frame[off + SIGNATURE.size:], sig


@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_flows_walk_the_profile_packets_in_order(direction):
    prof = TrafficProfile(direction=direction, frame_size=128, flows=5, plan=SessionPlan(5))
    # uplink keeps flow 0's outer IPv4 header (the SGW address): the PGW-U ignores it
    keep = prof.offsets()["gtp"] if direction == "ul" else 0
    with load(prof, stream_mask=0) as obj:
        for i in range(12):
            out = run(obj, prof.packet(0))
            body, sig = unsign(prof, out)
            assert body == prof.packet(0)[:keep] + prof.packet(i % 5)[keep:], f"packet {i}"
            assert sig[0] == SIGNATURE_MAGIC and sig[2] == i  # one stream: seq counts every packet


def test_tcp_checksums_stay_valid_with_addresses_ports_and_signature_changing():
    prof = TrafficProfile(direction="dl", frame_size=200, flows=7, plan=SessionPlan(7), inner_l4="tcp")
    with load(prof, flow_op="random") as obj:
        seen = set()
        for _ in range(50):
            pkt = Ether(run(obj, prof.packet(0)))
            ip = bytes(pkt[IP])
            assert ones_sum(ip[:20]) == 0xFFFF
            seg = bytes(pkt[TCP])
            pseudo = ip[12:20] + struct.pack("!BBH", 0, 6, len(seg))
            assert ones_sum(pseudo + seg) == 0xFFFF
            seen.add(pkt[IP].dst)
        assert len(seen) > 3  # random flows really vary
        assert seen <= {prof.session(i).ue_addr for i in range(7)}


def test_headers_are_restored_from_the_template_every_time():
    """Live frames are recycled after the DUT rewrote them: the generator must not care."""
    prof = TrafficProfile(direction="ul", frame_size=128)
    junk = bytes(range(96)) + prof.packet(0)[96:]
    with load(prof) as obj:
        body, _ = unsign(prof, run(obj, junk))
    assert body == prof.packet(0)


def test_streams_are_per_flow_when_flows_fit():
    prof = TrafficProfile(direction="ul", frame_size=128, flows=4, plan=SessionPlan(4))
    base, mask = stream_plan([0, 1], 1, prof.flows)
    assert (base, mask) == (4, 3)
    with load(prof, stream_base=base, stream_mask=mask) as obj:
        sigs = [unsign(prof, run(obj, prof.packet(0)))[1] for _ in range(8)]
    assert [s[1] for s in sigs] == [4, 5, 6, 7, 4, 5, 6, 7]  # stream = base + flow
    assert [s[2] for s in sigs] == [0, 0, 0, 0, 1, 1, 1, 1]  # sequence numbers per stream


def test_stream_plan_shares_the_streams_between_threads():
    for threads in (1, 2, 3, 8):
        cores = list(range(threads))
        plans = [stream_plan(cores, c, 1000) for c in cores]
        ids = [b + k for b, m in plans for k in range(m + 1)]
        assert len(ids) == len(set(ids)) and max(ids) < GEN_MAX_STREAMS
    assert stream_plan([0], 0, 1) == (0, 0)
    assert stream_plan([0], 5, 10) == (0xFFFF, 0)  # not a generator CPU


def test_bad_field_engine_is_refused():
    prof = TrafficProfile(direction="ul", frame_size=128)
    eng = prof.field_engine()
    from dataclasses import replace

    with pytest.raises(ConfigError, match="checksum offset"):
        build_config(prof.packet(0), replace(eng, csum_offsets=(61,)), 1)
    with pytest.raises(ConfigError, match="flow_op"):
        prof.field_engine("shuffle")
