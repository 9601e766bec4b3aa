"""A differential flame graph of nanoseconds per packet, not of shares: each stack of the DUT's
packet threads weighs its cost per packet in each set (its samples / the trial's packet-thread
samples x the trial's ``dut_ns_per_packet``, mean over the set's trials).

inferno draws integer counts, so costs are given in picoseconds per packet. The graph shows ``b``'s
stacks, red where they cost more than in ``a`` and blue where less; its total width is ``b``'s cost.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from perfkit.explain.cost import TrialProfile, packet_stacks
from perfkit.perf.flamegraph import differential_svg

#: The unit of the flame graph's counts.
COUNT_NAME = "ps per packet"
PS_PER_NS = 1000


def stack_costs(profiles: Sequence[TrialProfile]) -> Counter[str]:
    """Stack (``thread;outermost;...;leaf``) -> mean cost per packet over the trials [ns]."""
    total: Counter[str] = Counter()
    for p in profiles:
        stacks = packet_stacks(p.folded, p.threads)
        n = sum(c for _, c in stacks)
        for frames, count in stacks:
            total[";".join(frames)] += p.dut_ns_per_packet * count / n / len(profiles)
    return total


def ns_diff_folded(a: Sequence[TrialProfile], b: Sequence[TrialProfile]) -> str:
    """``stack <a ps> <b ps>`` lines, sorted by stack: inferno's differential input, in ps per packet."""
    ca, cb = stack_costs(a), stack_costs(b)
    lines = []
    for stack in sorted(set(ca) | set(cb)):
        va, vb = round(ca.get(stack, 0.0) * PS_PER_NS), round(cb.get(stack, 0.0) * PS_PER_NS)
        if va or vb:
            lines.append(f"{stack} {va} {vb}\n")
    return "".join(lines)


def ns_diff_flamegraph_svg(a: Sequence[TrialProfile], b: Sequence[TrialProfile], title: str,
                           *, width: int = 1200) -> str:
    """The differential flame graph of ``b`` against ``a`` in ps per packet (an interactive SVG)."""
    return differential_svg(ns_diff_folded(a, b), title, width=width, count_name=COUNT_NAME)
