"""The generator program (bpf/gen.bpf.c) in the real kernel: BPF_PROG_TEST_RUN without live frames
shows the frame it builds. Flow i must be the profile's packet(i); checksums must verify.
The program is compiled per profile as perfkit runs it (perfkit/bpfbuild.py)."""
from __future__ import annotations

import os
import struct
from dataclasses import replace

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from perfkit.errors import ConfigError
from perfkit.layouts import GEN_MAX_STREAMS
from perfkit.testbed import bpfbuild
from perfkit.layouts import gen_state
from perfkit.libbpf import BpfObject, num_possible_cpus
from perfkit.testbed.bpfbuild import load_generator, object_path
from perfkit.testbed.livegen import build_config, compile_generator, stream_plan
from perfkit.dataplanes.pgwu.control import SessionPlan
from perfkit.checksum import ones_sum
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC


@pytest.fixture(autouse=True)
def one_cpu():
    """Per-CPU generator state: keep every run on one CPU."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})
    yield min(old)
    os.sched_setaffinity(0, old)


def load(profile: PgwuTraffic, flow_op: str = "inc", stream_base: int = 0, stream_mask: int = 0,
         plain: bool = False) -> BpfObject:
    """The generator for ``profile`` sending on lo; ``plain``: the Makefile's build, configured
    through .rodata at load instead of compiled in."""
    if plain:
        obj = BpfObject(object_path("gen"), rodata=build_config(profile.packet(0), profile.field_engine(flow_op)),
                        initial_values={".rodata.port": struct.pack("=I", 1)})
    else:
        obj = load_generator(compile_generator(profile, flow_op), 1)
    obj.map("gen_state").update(struct.pack("=I", 0), bytes(gen_state(stream_base=stream_base, stream_mask=stream_mask))
                                * num_possible_cpus())
    return obj


def run(obj: BpfObject, frame: bytes) -> bytes:
    res = obj.program("xdp_gen").test_run(frame)
    assert res.verdict == "XDP_REDIRECT"
    return res.data_out



def unsign(profile: PgwuTraffic, frame: bytes) -> tuple[bytes, tuple]:
    """The frame with its signature zeroed like the template's, and the signature fields."""
    off = profile.offsets()["signature"]
    sig = SIGNATURE.unpack_from(frame, off)
    blank = SIGNATURE.pack(SIGNATURE_MAGIC, 0, 0, 0)
    return frame[:off] + blank + frame[off + SIGNATURE.size:], sig


@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_flows_walk_the_profile_packets_in_order(direction):
    prof = PgwuTraffic(direction=direction, frame_size=128, flows=5, plan=SessionPlan(5))
    # uplink keeps flow 0's outer IPv4 header (the SGW address): the PGW-U ignores it
    keep = prof.offsets()["gtp"] if direction == "ul" else 0
    with load(prof, stream_mask=0) as obj:
        for i in range(12):
            out = run(obj, prof.packet(0))
            body, sig = unsign(prof, out)
            assert body == prof.packet(0)[:keep] + prof.packet(i % 5)[keep:], f"packet {i}"
            assert sig[0] == SIGNATURE_MAGIC and sig[2] == i  # one stream: seq counts every packet


def test_tcp_checksums_stay_valid_with_addresses_ports_and_signature_changing():
    prof = PgwuTraffic(direction="dl", frame_size=200, flows=7, plan=SessionPlan(7), inner_l4="tcp")
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
    prof = PgwuTraffic(direction="ul", frame_size=128)
    junk = bytes(range(96)) + prof.packet(0)[96:]
    with load(prof) as obj:
        body, _ = unsign(prof, run(obj, junk))
    assert body == prof.packet(0)


def test_streams_are_per_flow_when_flows_fit():
    prof = PgwuTraffic(direction="ul", frame_size=128, flows=4, plan=SessionPlan(4))
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
    prof = PgwuTraffic(direction="ul", frame_size=128)
    eng = prof.field_engine()
    with pytest.raises(ConfigError, match="checksum offset"):
        build_config(prof.packet(0), replace(eng, csum_offsets=(61,)))
    with pytest.raises(ConfigError, match="flow_op"):
        prof.field_engine("shuffle")


@pytest.mark.parametrize("direction,flow_op", [("ul", "inc"), ("dl", "random")])
def test_compiled_in_and_rodata_configurations_build_the_same_frames(direction, flow_op):
    """The per-profile build must mean exactly what the plain build does with the same configuration."""
    prof = PgwuTraffic(direction=direction, frame_size=200, flows=9, plan=SessionPlan(9))
    frames = {}
    for plain in (False, True):
        with load(prof, flow_op, stream_mask=7, plain=plain) as obj:
            st = bytes(gen_state(stream_mask=7, rng=0x9E3779B97F4A7C15)) * num_possible_cpus()
            obj.map("gen_state").update(struct.pack("=I", 0), st)
            frames[plain] = [masked(prof, flow_op, run(obj, prof.packet(0))) for _ in range(20)]
    assert frames[False] == frames[True]
    assert len({f[:60] for f in frames[False]}) > 3  # the flows really vary


def masked(prof: PgwuTraffic, flow_op: str, frame: bytes) -> bytes:
    """``frame`` without what depends on the clock: the transmit time and the checksums over it
    (the other tests check those checksums)."""
    out = bytearray(frame)
    off = prof.offsets()["signature"] + SIGNATURE.size - 4
    out[off:off + 4] = bytes(4)
    for c in prof.field_engine(flow_op).csum_offsets:
        out[c:c + 2] = bytes(2)
    return bytes(out)


def test_specialised_objects_are_cached_by_configuration(tmp_path, monkeypatch):
    monkeypatch.setattr(bpfbuild, "CACHE_DIR", tmp_path)
    a = compile_generator(PgwuTraffic(direction="ul", frame_size=128))
    mtime = a.stat().st_mtime_ns
    assert compile_generator(PgwuTraffic(direction="ul", frame_size=128)) == a and a.stat().st_mtime_ns == mtime
    b = compile_generator(PgwuTraffic(direction="ul", frame_size=130))
    assert b != a and b.parent == tmp_path


def test_clangs_version_is_asked_once_per_binary(tmp_path, monkeypatch):
    """The objects' keys hold ``clang --version``: kept in the cache under the binary's identity, so
    that a run does not start clang for it; another binary (or the same one changed) is asked."""
    import subprocess

    want = subprocess.run([bpfbuild.CLANG, "--version"], capture_output=True, text=True, check=True).stdout
    monkeypatch.setattr(bpfbuild, "CACHE_DIR", tmp_path)
    bpfbuild._clang_version.cache_clear()
    assert bpfbuild._clang_version() == want and len(list(tmp_path.glob("clang-*.version"))) == 1
    bpfbuild._clang_version.cache_clear()
    monkeypatch.setattr(bpfbuild.subprocess, "run", lambda *a, **k: pytest.fail("clang started again"))
    assert bpfbuild._clang_version() == want
    fake = tmp_path / "bin" / "clang"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho fake clang 1.0\n")
    fake.chmod(0o755)
    monkeypatch.undo()
    monkeypatch.setattr(bpfbuild, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(bpfbuild, "CLANG", str(fake))
    bpfbuild._clang_version.cache_clear()
    assert bpfbuild._clang_version() == "fake clang 1.0\n"
    bpfbuild._clang_version.cache_clear()


def sliced(profile, part: int, parts: int) -> BpfObject:
    """The generator for slice ``part`` of ``parts`` of ``profile``'s flows, as a tester host runs it."""
    from perfkit.stl.fieldengine import FlowSlice, slice_engine
    engine, starts = slice_engine(profile.field_engine(), FlowSlice(part, parts))
    obj = load_generator(bpfbuild.specialised("gen", "GEN_CONFIG", build_config(profile.packet(0), engine)), 1)
    state = gen_state(stream_mask=0)
    state.var_pos[:len(starts)] = starts
    obj.map("gen_state").update(struct.pack("=I", 0), bytes(state) * num_possible_cpus())
    return obj


def flows_sent(profile, obj: BpfObject, frames: int, keep: int = 0) -> list[int]:
    """Which of ``profile``'s flows each of ``frames`` frames is (its bytes past ``keep``)."""
    bodies = {profile.packet(i)[keep:]: i for i in range(profile.flows)}
    return [bodies[unsign(profile, run(obj, profile.packet(0)))[0][keep:]] for _ in range(frames)]


@pytest.mark.parametrize("profile", [
    PgwuTraffic(direction="dl", frame_size=128, flows=12, plan=SessionPlan(12, tenants=4, tagged=True)),
    PgwuTraffic(direction="ul", frame_size=128, flows=6, plan=SessionPlan(6)),
], ids=["pgwu-dl-4-tenants", "pgwu-ul"])
def test_slices_of_the_flows_are_disjoint_and_cover_them(profile):
    """Several tester hosts share a scenario's flows: each walks its own slice, every variable
    stepping together, so every frame is one of the profile's flows and no two slices share one."""
    parts = 3
    keep = profile.offsets()["gtp"] if profile.direction == "ul" else 0
    seen = []
    for part in range(parts):
        with sliced(profile, part, parts) as obj:
            walk = flows_sent(profile, obj, 2 * profile.flows // parts, keep)
        assert walk[:profile.flows // parts] == walk[profile.flows // parts:], f"slice {part} repeats its flows"
        seen.append(set(walk))
    assert all(len(s) == profile.flows // parts for s in seen)
    assert set().union(*seen) == set(range(profile.flows))


def test_slices_refuse_what_cannot_be_split():
    from perfkit.stl.fieldengine import FlowSlice, slice_engine
    prof = PgwuTraffic(direction="ul", frame_size=128, flows=5, plan=SessionPlan(5))
    with pytest.raises(ConfigError, match="flows: 5 is not allowed.*multiple of the 2"):
        slice_engine(prof.field_engine(), FlowSlice(1, 2))
    with pytest.raises(ConfigError, match="flow_op"):
        slice_engine(prof.field_engine("random"), FlowSlice(0, 2))
    with pytest.raises(ConfigError, match="flow slice"):
        FlowSlice(2, 2)
