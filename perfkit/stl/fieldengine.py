"""The generator's field engine: how frames vary from packet to packet, in the spirit of TRex's
field engine (``STLVmFlowVar`` + ``STLVmWrFlowVar`` + checksum fix-ups).

A dataplane's traffic profile describes its variation as a ``FieldEngine`` with byte offsets into
its template frame, and where the signature goes (``perfkit.stl.signature``); the generator
(``perfkit.testbed.livegen``) compiles it into ``bpf/gen.bpf.c``, the TRex backend into TRex's
instructions (``perfkit.trex.streams``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from perfkit.errors import ConfigError
from perfkit.stl.signature import SIGNATURE

__all__ = ["FLOW_OPS", "FlowVar", "FieldWrite", "FieldEngine", "FlowSlice", "csum_mask", "flow_engine", "slice_engine",
           "walk_period"]
FLOW_OPS = ("inc", "dec", "random")


@dataclass(frozen=True)
class FlowVar:
    """A value computed once per packet (TRex: STLVmFlowVar)."""

    op: str
    """inc, dec or random."""
    min: int
    max: int
    """Inclusive."""
    step: int = 1


@dataclass(frozen=True)
class FieldWrite:
    """Write a variable plus a constant into the frame (TRex: STLVmWrFlowVar with add_value)."""

    name: str
    """What it writes, for people: ``outer.dst``, ``inner.src`` ..."""
    offset: int
    size: int
    var: int
    add: int
    csum_mask: int
    """Bit i: the i-th checksum of ``FieldEngine.csum_offsets`` covers these bytes."""


@dataclass(frozen=True)
class FieldEngine:
    """How the generator varies frames and which checksums it fixes up, with byte offsets."""

    vars: tuple[FlowVar, ...]
    writes: tuple[FieldWrite, ...]
    csum_offsets: tuple[int, ...]
    """Offsets of the 16-bit checksums kept valid."""
    sig_offset: int
    sig_csum_mask: int
    l3_offset: int = -1
    """Offset of the IPv4 header the checksums belong to (its checksum is at ``l3_offset + 10``)."""
    l4_offset: int = -1
    """Offset of the L4 header whose checksum is kept (TCP: at ``l4_offset + 16``); -1: none."""


Ranges = list[tuple[int, int]]


def csum_mask(covers: list[Ranges], start: int, size: int) -> int:
    """Bit i set when checksum i (covering the byte ranges ``covers[i]``, [lo, hi)) covers any byte
    of [start, start + size)."""
    return sum(1 << i for i, ranges in enumerate(covers)
               if any(start < hi and lo < start + size for lo, hi in ranges))


def flow_engine(writes: list[tuple[str, int, int, int]], flows: int, csum_offsets: list[int],
                covers: list[Ranges], sig_offset: int, flow_op: str = "inc", l3_offset: int = -1,
                l4_offset: int = -1) -> FieldEngine:
    """The usual engine: one variable, the flow number 0 .. flows-1, written (plus a constant) into
    each ``(name, offset, size, add)`` of ``writes``; checksums at ``csum_offsets`` kept valid (those
    of the IPv4 header at ``l3_offset`` and the L4 header at ``l4_offset``)."""
    if flow_op not in FLOW_OPS:
        raise ConfigError("flow_op", flow_op, FLOW_OPS)
    fws = tuple(FieldWrite(n, o, sz, 0, add, csum_mask(covers, o, sz)) for n, o, sz, add in writes)
    variables = (FlowVar(flow_op, 0, flows - 1),) if writes else ()
    return FieldEngine(variables, fws, tuple(csum_offsets), sig_offset, csum_mask(covers, sig_offset, SIGNATURE.size),
                       l3_offset, l4_offset)


@dataclass(frozen=True)
class FlowSlice:
    """Part ``part`` of ``parts`` disjoint slices of an engine's flows (one per generator host):
    the slice takes every ``parts``-th step of the variables' common walk, from step ``part``."""

    part: int = 0
    parts: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.part < self.parts:
            raise ConfigError("flow slice", f"{self.part}/{self.parts}", "0 <= part < parts")


def walk_period(engine: FieldEngine) -> int:
    """Frames before the variables (stepping together) repeat their values: the flows walked."""
    period = 1
    for v in engine.vars:
        period = math.lcm(period, (v.max - v.min + 1) // math.gcd(v.step, v.max - v.min + 1))
    return period


def slice_engine(engine: FieldEngine, cut: FlowSlice) -> tuple[FieldEngine, tuple[int, ...]]:
    """``engine`` restricted to the slice ``cut``, and each variable's starting position (an offset
    from its ``min``, ``max`` for ``dec``): every variable steps ``parts`` of its steps at once, so
    the variables stay in step and the slices never share a flow."""
    if cut.parts == 1:
        return engine, tuple(0 for _ in engine.vars)
    if any(v.op == "random" for v in engine.vars):
        raise ConfigError("flow_op", "random", "inc or dec when several generators share the flows: "
                          "random values would not keep their slices disjoint")
    period = walk_period(engine)
    if period % cut.parts:
        raise ConfigError("flows", period, f"a multiple of the {cut.parts} generators sharing them, "
                          "so each gets a disjoint slice")
    ranges = [v.max - v.min + 1 for v in engine.vars]
    variables = tuple(replace(v, step=v.step * cut.parts % r) for v, r in zip(engine.vars, ranges))
    starts = tuple(v.step * cut.part % r for v, r in zip(engine.vars, ranges))
    return replace(engine, vars=variables), starts
