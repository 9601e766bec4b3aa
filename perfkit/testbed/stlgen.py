"""A TRex STL stream compiled into perfkit's XDP generator (``bpf/gen.bpf.c``, its ``vm_*`` part),
and ``show``: the frames that generator program sends, produced by the real program through
BPF_PROG_TEST_RUN without a testbed.

The generator restores the template's first bytes for every packet, runs the profile's VM in its
order (``perfkit.stl.vm`` says what each instruction does, after trex-core), writes perfkit's
signature where the profile leaves room (``signature_room``), then brings each checksum the profile
fixes up to date incrementally (RFC 1624): the template carries it right for the template, and the
program sums only the 16-bit words a write or the signature may change. That equals TRex's full
recomputation as long as no write after a fix-up touches what it covers (refused otherwise).
"""
from __future__ import annotations

import ctypes
import math
import os
import struct
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

from perfkit import dataplanes
from perfkit.encap import Encap, innermost_l4
from perfkit.errors import ConfigError
from perfkit.layouts import (GEN_MIX_MAX_STREAMS, GEN_TEMPLATE_MAX, GEN_VM_BIG_ENDIAN, GEN_VM_CSUM_RANGES,
                             GEN_VM_CSUM_UDP, GEN_VM_MAX_CSUMS, GEN_VM_MAX_OPS, GEN_VM_MAX_VARS, GEN_VM_PORT,
                             IPPROTO_UDP, GenVmOpKind, GenVmVarOp, gen_config, gen_mix, gen_state)
from perfkit.libbpf import num_possible_cpus
from perfkit.stl import addresses
from perfkit.stl.addresses import Mapping
from perfkit.stl.profile import Instr, StlProfile, StlStream
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.stl.vm import Checksum, checksums, initial, step_of
from perfkit.testbed.bpfbuild import load_generator, specialised

_OPS = {"inc": GenVmVarOp.GEN_VM_INC, "dec": GenVmVarOp.GEN_VM_DEC, "random": GenVmVarOp.GEN_VM_RANDOM,
        "tuple": GenVmVarOp.GEN_VM_TUPLE}
_KINDS = {"update": GenVmOpKind.GEN_VM_OP_UPDATE, "write": GenVmOpKind.GEN_VM_OP_WRITE,
          "write_mask": GenVmOpKind.GEN_VM_OP_WRITE_MASK}
Ranges = list[tuple[int, int]]


@dataclass(frozen=True)
class Stream:
    """One stream ready for the generator."""

    config: gen_config
    frame: bytes
    """Its frame with the template's checksums set right for the template."""
    sig_offset: int
    """Where the signature goes; 0: the stream leaves no room (counts come from the sink's totals)."""
    why_unsigned: str = ""
    """Why there is no signature, for the trial's notes."""
    count: int = 0
    """Packets the stream sends in all (its bursts); 0: continuous."""
    burst: int = 0
    """Packets per burst before a gap; 0: one burst."""
    isg_ns: int = 0
    """Start delay [ns]."""
    ibg_ns: int = 0
    """Gap after each burst [ns]."""


@dataclass(frozen=True)
class Compiled:
    """A profile's streams ready for the generator: one configuration each, and the mix."""

    streams: tuple[Stream, ...]
    weights: tuple[int, ...] = (1,)
    """Frames of each stream per ``sum(weights)`` frames (the relative rates)."""
    address_maps: tuple[Mapping, ...] = ()
    """The prefixes mapped into the testbed's address ranges (``perfkit.stl.addresses``)."""

    @property
    def config(self) -> gen_config:
        return self.streams[0].config

    @property
    def frame(self) -> bytes:
        """The frame handed to BPF_PROG_TEST_RUN: the longest stream's (the others are trimmed)."""
        return max((s.frame for s in self.streams), key=len)

    @property
    def sig_offset(self) -> int:
        return self.streams[0].sig_offset

    @property
    def why_unsigned(self) -> str:
        return "; ".join(s.why_unsigned for s in self.streams if not s.sig_offset)

    @property
    def timed(self) -> bool:
        """A stream has a start delay, or bursts (a finite count, gaps): the program keeps per-stream
        counts and clocks (``gen_mix``)."""
        return any(s.count or s.isg_ns for s in self.streams)

    @property
    def finite(self) -> bool:
        """Every stream sends a finite count (bursts): the profile ends by itself."""
        return all(s.count for s in self.streams)

    def plan(self, rate_pps: float | None, duration: float, packets: int | None) -> list[int | None]:
        """Frames of each stream a send of ``rate_pps`` for ``duration`` s (or of ``packets``) sends
        (None: no limit), as TRex does: a stream sends its share of the rate from its start delay
        on, a burst at most its count, a multi-burst pauses its gap after each burst; TRex stops
        every stream at the duration."""
        out: list[int | None] = []
        for s, w in zip(self.streams, self.weights):
            if not rate_pps:  # a count, or as fast as possible: bursts send their count, the rest no limit
                out.append(s.count or None)
                continue
            r = rate_pps * w / sum(self.weights)
            left = duration - s.isg_ns / 1e9
            if not s.count:
                out.append(max(0, round(r * left)) if packets is None else None)
                continue
            out.append(min(s.count, _fitting(s, r, left)) if packets is None else s.count)
        return out

    @property
    def signed(self) -> bool:
        """Every stream carries perfkit's signature."""
        return all(s.sig_offset for s in self.streams)

    def extra(self) -> dict[str, ctypes.Structure]:
        """The other streams' configurations and the mix, as ``bpfbuild.specialised`` takes them."""
        if len(self.streams) == 1 and not self.timed:
            return {}
        mix = gen_mix(nstreams=len(self.streams), base_len=len(self.frame), total=sum(self.weights),
                      timed=int(any(s.isg_ns or s.ibg_ns for s in self.streams)))
        for i, (w, s) in enumerate(zip(self.weights, self.streams)):
            mix.weight[i], mix.burst[i], mix.start_ns[i], mix.gap_ns[i] = w, s.burst, s.isg_ns, s.ibg_ns
        out: dict[str, ctypes.Structure] = {"GEN_MIX": mix}
        for i in range(1, GEN_MIX_MAX_STREAMS):
            out[f"GEN_CONFIG{i}"] = self.streams[i].config if i < len(self.streams) else gen_config()
        return out


def _fitting(s: Stream, rate_pps: float, left: float) -> int:
    """Frames of the bursts of ``s`` sent at ``rate_pps`` in ``left`` s from its start."""
    if left <= 0:
        return 0
    if not s.burst:
        return round(rate_pps * left)
    span, gap = s.burst / rate_pps, s.ibg_ns / 1e9
    bursts = s.count // s.burst
    full = min(bursts, math.floor((left - span) / (span + gap)) + 1) if left >= span else 0
    rest = left - full * (span + gap)
    return full * s.burst + (min(s.burst, max(0, round(rest * rate_pps))) if full < bursts else 0)


def compile_stream(stream: StlStream, signature: bool = True, var_base: int = 0,
                   encaps: tuple[Encap, ...] | None = None) -> Compiled:
    """The generator's configuration for ``stream`` alone (refusals name the instruction); the
    signature goes where the sink finds it through ``encaps`` (default: every dataplane's tunnels)."""
    return Compiled((_stream(stream, signature, var_base, _tunnels(encaps)),))


def compile_profile(profile: StlProfile, signature: bool = True, encaps: tuple[Encap, ...] | None = None) -> Compiled:
    """Every stream of ``profile`` at its relative rate (up to GEN_MIX_MAX_STREAMS streams whose frames
    differ only in their first GEN_TEMPLATE_MAX bytes: the longest stream's frame is the kernel's)."""
    if len(profile.streams) > GEN_MIX_MAX_STREAMS:
        raise ConfigError("TRex profile streams", len(profile.streams), f"1 .. {GEN_MIX_MAX_STREAMS} streams")
    out, base = [], 0
    for st in profile.streams:
        out.append(_stream(st, signature, base, _tunnels(encaps)))
        base += len(st.vars)
    if base > GEN_VM_MAX_VARS:
        raise ConfigError("TRex profile variables", base, f"<= {GEN_VM_MAX_VARS} over all streams")
    longest = max((s.frame for s in out), key=len)
    for st, s in zip(profile.streams, out):
        keep = s.config.restore_len
        if s.frame[keep:] != longest[keep:len(s.frame)]:
            raise ConfigError(f"{st.name} frame", f"bytes {keep}.. differ from the longest stream's",
                              f"streams whose frames differ only in their first {keep} bytes (the generator restores "
                              "those per stream)")
    return Compiled(tuple(out), weights(profile.shares()))


def weights(shares: list[float]) -> tuple[int, ...]:
    """Small integer weights in the ratio of ``shares`` (exact for ratios of small integers)."""
    fr = [Fraction(x / max(shares)).limit_denominator(1000) for x in shares]
    den = math.lcm(*(f.denominator for f in fr))
    ints = [int(f * den) for f in fr]
    g = math.gcd(*ints)
    ints = [max(1, i // g) for i in ints]
    if sum(ints) > 1 << 20:  # far apart: the nearest weights out of a million
        ints = [max(1, round(x / sum(shares) * 1_000_000)) for x in shares]
    return tuple(ints)


def _tunnels(encaps: tuple[Encap, ...] | None) -> tuple[Encap, ...]:
    """The tunnels the sink walks through: ``encaps``, or every dataplane's."""
    return dataplanes.encapsulations() if encaps is None else tuple(encaps)


def _stream(stream: StlStream, signature: bool, var_base: int, encaps: tuple[Encap, ...]) -> Stream:
    frame = bytes(stream.frame)
    restore = min(GEN_TEMPLATE_MAX, len(frame)) // 8 * 8
    writes = [(ins.offset, ins.offset + ins.size) for ins in stream.program if ins.kind in ("write", "write_mask")]
    for ins in stream.program:
        if ins.kind in ("write", "write_mask") and ins.offset + ins.size > restore:
            raise ConfigError(f"{stream.name} {ins.kind} pkt_offset", ins.offset,
                              f"writes inside the first {restore} bytes (the template the generator restores)")
    sig, why = signature_room(frame, writes, encaps) if signature else (0, "not asked for")
    dirty = writes + ([(sig, sig + SIGNATURE.size)] if sig else [])
    cfg = gen_config(frame_len=len(frame), restore_len=restore)
    cfg.sig_off = sig
    tmpl = bytearray(frame[:GEN_TEMPLATE_MAX].ljust(GEN_TEMPLATE_MAX, b"\0"))
    csums = _checksums(stream, frame, tmpl, dirty, restore, sig, encaps)
    ctypes.memmove(cfg.tmpl, bytes(tmpl), GEN_TEMPLATE_MAX)
    _vars(stream, cfg, var_base)
    _ops(stream, cfg, var_base)
    for i, (c, ranges, udp) in enumerate(csums):
        cc = cfg.vm_csums[i]
        cc.off, cc.flags, cc.nranges = c.field, GEN_VM_CSUM_UDP if udp else 0, len(ranges)
        for r, (lo, hi) in enumerate(ranges):
            cc.lo[r], cc.hi[r] = lo, hi
        cc.old = sum(~w & 0xFFFF for lo, hi in ranges for w in struct.unpack_from(f"={(hi - lo) // 2}H", tmpl, lo))
    cfg.vm_ncsums = len(csums)
    return Stream(cfg, bytes(tmpl[:len(frame)]) + frame[GEN_TEMPLATE_MAX:], sig, why, stream.count, stream.burst,
                  round(stream.isg * 1e3), round(stream.ibg * 1e3))


def signature_room(frame: bytes, writes: Ranges, encaps: tuple[Encap, ...] | None = None) -> tuple[int, str]:
    """(offset, "") of perfkit's signature, or (0, why not): the innermost UDP or TCP payload of an
    IPv4 frame (through a VLAN tag and the tunnels of ``encaps``, as the sink looks:
    ``perfkit.encap.innermost_l4``), at least 12 bytes long, inside the first GEN_TEMPLATE_MAX bytes
    and not written by the profile's VM."""
    found = innermost_l4(frame, _tunnels(encaps))
    if found is None:
        return 0, "the frame has no IPv4 UDP or TCP payload the sink can find"
    off = found[2]
    end = off + SIGNATURE.size
    if end > len(frame) or end > GEN_TEMPLATE_MAX:
        return 0, f"the L4 payload at byte {off} leaves no {SIGNATURE.size} bytes within the first {GEN_TEMPLATE_MAX}"
    if any(lo < end and off < hi for lo, hi in writes):
        return 0, f"the profile's VM writes into the L4 payload's first {SIGNATURE.size} bytes"
    return off, ""


def _checksums(stream: StlStream, frame: bytes, tmpl: bytearray, dirty: Ranges, restore: int,
               sig: int, encaps: tuple[Encap, ...]) -> list[tuple[Checksum, Ranges, bool]]:
    """The checksums to keep right, in the order to apply them, each with the word ranges that may
    change; the template's copies are set right for the template."""
    fixes: dict[int, Checksum] = {}
    for k, ins in enumerate(stream.program):
        if ins.kind not in ("csum_ipv4", "csum_hw", "csum_icmpv6"):
            continue
        for c in checksums(ins, frame):
            _check_after(stream, k, ins, c)
            _check_shape(stream, c, dirty)
            fixes[c.field] = c
    keep = list(fixes.values())
    extra = _signature_checksum(frame, sig, fixes, encaps) if sig else None
    order = _inner_first(keep)
    for c in order:  # the template right for itself: TRex recomputes each one fully
        tmpl[c.field:c.field + 2] = b"\0\0"
        tmpl[c.field:c.field + 2] = struct.pack("!H", c.value(tmpl[:len(frame)] + frame[GEN_TEMPLATE_MAX:]))
    out: list[tuple[Checksum, Ranges, bool]] = []
    changing: set[int] = set()
    for c in order:
        ranges = _words(dirty + [(f, f + 2) for f in changing], c.covers)
        for w in dirty:
            if w[0] < c.field + 2 and c.field < w[1] and not (sig and w == (sig, sig + SIGNATURE.size)):
                raise ConfigError(f"{stream.name} checksum at byte {c.field}", "written by the VM",
                                  "writes beside the checksums the profile fixes, not into them")
        if ranges:
            out.append((c, _fit(stream, c, ranges, restore), c.udp))
            changing.add(c.field)
    if extra is not None:
        out.append((extra, list(extra.covers), extra.udp))
    if len(out) > GEN_VM_MAX_CSUMS:
        raise ConfigError(f"{stream.name} checksums", len(out), f"<= {GEN_VM_MAX_CSUMS} that change per packet")
    return out


def _check_after(stream: StlStream, k: int, ins: Instr, c: Checksum) -> None:
    """TRex fixes a checksum where the instruction stands: a later write into what it covers would
    go out unfixed there, which this generator does not reproduce."""
    for later in stream.program[k + 1:]:
        if later.kind in ("write", "write_mask") and any(
                later.offset < hi and lo < later.offset + later.size for lo, hi in c.covers):
            raise ConfigError(f"{stream.name} {ins.kind} before a write", f"write at byte {later.offset}",
                              "checksum fix-ups after the writes they cover")


def _check_shape(stream: StlStream, c: Checksum, dirty: Ranges) -> None:
    """A write into a header length, total length or protocol changes what a fix-up covers in every
    packet (TRex reads them per packet); the generator's coverage is the template's."""
    for lo, hi in dirty:
        if any(lo < shi and slo < hi for slo, shi in c.shape):
            raise ConfigError(f"{stream.name} write at byte {lo}", "into a header length, total length or IP next-header byte",
                              f"writes outside what decides the coverage of the checksum at byte {c.field}")


def _signature_checksum(frame: bytes, sig: int, fixes: dict[int, Checksum],
                        encaps: tuple[Encap, ...]) -> Checksum | None:
    """The innermost L4 checksum, when the template carries one the profile does not fix: kept as
    the template has it, but for the signature's bytes (which must not break it)."""
    l4, proto, _ = innermost_l4(frame, encaps) or (0, 0, 0)
    field = l4 + (6 if proto == IPPROTO_UDP else 16)
    if not proto or field in fixes or (proto == IPPROTO_UDP and frame[field:field + 2] == b"\0\0"):
        return None  # fixed by the profile, or no UDP checksum at all
    return Checksum(field, ((sig & ~1, (sig + SIGNATURE.size + 1) & ~1),), udp=proto == IPPROTO_UDP)


def _inner_first(cs: list[Checksum]) -> list[Checksum]:
    """Checksums ordered so that one covering another's field comes after it."""
    out: list[Checksum] = []
    pending = list(cs)
    while pending:
        ready = [c for c in pending if not any(o is not c and any(lo <= o.field < hi for lo, hi in c.covers)
                                              for o in pending)]
        if not ready:
            raise ConfigError("checksums", [c.field for c in pending], "checksums that do not cover each other")
        out += ready
        pending = [c for c in pending if c not in ready]
    return out


def _words(dirty: Ranges, covers: tuple[tuple[int, int], ...]) -> Ranges:
    """The even-aligned 16-bit words of ``dirty`` inside ``covers``, merged into ranges."""
    words = sorted({w for lo, hi in dirty for w in range(lo & ~1, hi, 2)
                    if any(clo <= w and w + 2 <= chi for clo, chi in covers)})
    out: Ranges = []
    for w in words:
        if out and out[-1][1] == w:
            out[-1] = (out[-1][0], w + 2)
        else:
            out.append((w, w + 2))
    return out


def _fit(stream: StlStream, c: Checksum, ranges: Ranges, restore: int) -> Ranges:
    if any(lo % 2 for lo, _ in c.covers):
        raise ConfigError(f"{stream.name} checksum at byte {c.field}", "at an odd offset", "headers at even offsets")
    if len(ranges) > GEN_VM_CSUM_RANGES or ranges[-1][1] > restore or c.field + 2 > restore:
        raise ConfigError(f"{stream.name} checksum at byte {c.field}", f"{len(ranges)} changing word ranges up to byte "
                          f"{ranges[-1][1]}", f"<= {GEN_VM_CSUM_RANGES} ranges within the first {restore} bytes")
    return ranges


def _vars(stream: StlStream, cfg: gen_config, base: int) -> None:
    """The stream's variables at indexes base.. (several streams share the per-CPU values)."""
    if base + len(stream.vars) > GEN_VM_MAX_VARS:
        raise ConfigError(f"{stream.name} variables", len(stream.vars), f"<= {GEN_VM_MAX_VARS - base}")
    cfg.vm_nvars = base + len(stream.vars) if stream.vars else 0
    for i, v in enumerate(stream.vars):
        cv = cfg.vm_vars[base + i]
        prev, port = initial(v)
        cv.min, cv.max, cv.prev, cv.op, cv.size = v.min, v.max, prev, _OPS[v.op], v.size
        cv.step = 1 if v.op == "tuple" else step_of(v)
        cv.port_min, cv.port_max, cv.prev_port, cv.limit = v.port_min, v.port_max, port, v.limit


def _ops(stream: StlStream, cfg: gen_config, base: int) -> None:
    ops = [ins for ins in stream.program if ins.kind in _KINDS]
    if len(ops) > GEN_VM_MAX_OPS:
        raise ConfigError(f"{stream.name} VM instructions", len(ops), f"<= {GEN_VM_MAX_OPS} variables and writes")
    cfg.vm_nops = len(ops)
    for k, ins in enumerate(ops):
        co = cfg.vm_ops[k]
        co.kind, co.var = _KINDS[ins.kind], base + ins.var
        if ins.kind == "update":
            continue
        co.offset, co.size, co.add = ins.offset, ins.size, ins.add & 0xFFFFFFFFFFFFFFFF
        co.flags = (GEN_VM_BIG_ENDIAN if ins.big_endian else 0) | (GEN_VM_PORT if ins.port else 0)
        co.mask, co.shift = ins.mask, ins.shift


def compile_object(compiled: Compiled) -> Path:
    """The generator object for a compiled stream (built once per configuration, cached)."""
    return specialised("gen", "GEN_CONFIG", compiled.config, compiled.extra())


def show(compiled: Compiled, count: int) -> list[bytes]:
    """The first ``count`` frames the generator program builds, run through BPF_PROG_TEST_RUN on one
    CPU (the program keeps its state per CPU), in the order it sends them, start delays and gaps
    left out; fewer when the profile's bursts end before."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})
    try:
        with load_generator(compile_object(compiled), 1) as obj:
            slots = 1 << (len(compiled.streams) - 1).bit_length()
            state = gen_state(rng=int.from_bytes(os.urandom(8), "little") | 1, stream_mask=slots - 1)
            for i, n in enumerate(compiled.plan(None, 0.0, None)):
                state.mix_limit[i] = n + 1 if n is not None else 0
            obj.map("gen_state").update(struct.pack("=I", 0), bytes(state) * num_possible_cpus())
            prog, out = obj.program("xdp_gen"), []
            # a finite profile ends once every stream has sent its count; a turn of a stream that
            # is done is idle, so at most as many idle runs as the mix has turns in a row
            idle, turns = 0, sum(compiled.weights)
            while len(out) < count and idle <= turns:
                res = prog.test_run(compiled.frame)
                if res.verdict == "XDP_DROP" and compiled.timed:
                    idle += 1
                    continue
                idle = 0
                if res.verdict != "XDP_REDIRECT":
                    raise ConfigError("generator", res.verdict, "XDP_REDIRECT (the program refused the frame)")
                out.append(res.data_out)
            return out
    finally:
        os.sched_setaffinity(0, old)


def blank_signature(frame: bytes, sig_offset: int) -> bytes:
    """``frame`` with its signature's sequence number and time zeroed (stream kept), for comparisons."""
    if not sig_offset:
        return frame
    magic, stream, _, _ = SIGNATURE.unpack_from(frame, sig_offset)
    assert magic == SIGNATURE_MAGIC
    return frame[:sig_offset] + SIGNATURE.pack(magic, stream, 0, 0) + frame[sig_offset + SIGNATURE.size:]


def for_testbed(profile: StlProfile, encaps: tuple[Encap, ...] | None = None) -> Compiled:
    """The streams the local generator sends for ``profile``, with perfkit's signature where it fits
    and every IP address inside the testbed's ranges (``perfkit.stl.addresses``; refusals name the
    write that cannot be mapped)."""
    sent, maps = addresses.for_testbed(profile)
    return replace(compile_profile(sent, signature=True, encaps=encaps), address_maps=maps)


def counting_note(profile: StlProfile, compiled: Compiled) -> str:
    """What the trial's counts rest on, for its notes."""
    sizes = sorted({len(s.frame) + 4 for s in compiled.streams})
    what = (f"traffic: TRex profile {profile.source}: {len(compiled.streams)} stream(s) "
            f"{', '.join(s.name for s in profile.streams)} at weights {':'.join(map(str, compiled.weights))}, "
            f"{'/'.join(map(str, sizes))}-byte frames")
    if compiled.signed:
        return f"{what}; perfkit's signature in every frame (per-stream counts, sequence, latency)"
    return (f"{what}; no signature ({compiled.why_unsigned}): received = frames the sink counted on the tester "
            "ports (no sequence or latency figures for those)")


def check_size(compiled: Compiled, frame_max: int, mtu_max: int) -> None:
    """Refuse a frame the testbed cannot carry (``perfkit.generators.xdp.check_frame_size``'s limits)."""
    if len(compiled.frame) > frame_max or len(compiled.frame) - 14 > mtu_max:
        raise ConfigError("TRex profile frame size", len(compiled.frame) + 4,
                          f"<= {min(frame_max, mtu_max + 14) + 4} bytes on the xdp testbed (one page per frame)")
