"""Where every offered packet went: the one accounting every generator uses (the local testbed's
``perfkit.generators.xdp``, the lab's ``perfkit.generators.lab`` and its DUT host's agent)::

    offered (generator)  = received (sink, socket, or the DUT's forwarding counters for XDP_DROP)
                           + DUT drops     (counters that rose and are not forwarding ones, and
                                            ``RING_DROP``: its receive ring or queue overflowed)
                           + tester drops  (``RING_DROP``: the tester's receive ring overflowed)
                           + unaccounted   (a note; 0 when the counters agree)

A dataplane's counters are read before and after a trial (``Dataplane.forwarding(traffic)`` names
those of the path the traffic should take); this module turns the two readings into what the trial
reports: drops by reason, packets handled, ring overflows, the unaccounted rest, and which verdicts
the DUT gave (``verdicts``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from perfkit.dataplane import VERDICTS
from perfkit.trial import RING_DROP, TrialResult


def rose(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Counters that rose between two readings, by how much [packets]."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def counter_drops(before: Mapping[str, int], after: Mapping[str, int], forwarding: Iterable[str]) -> dict[str, int]:
    """DUT drops by reason: the counters that rose and are not forwarding ones."""
    forward = frozenset(forwarding)
    return {k: n for k, n in rose(before, after).items() if k not in forward}


def handled(before: Mapping[str, int], after: Mapping[str, int], forwarding: Iterable[str]) -> int:
    """Packets the forwarding counters counted between two readings: what XDP_DROP traffic is
    received as (it counts as handled when the DUT dropped it as intended)."""
    forward = frozenset(forwarding)
    return sum(n for k, n in rose(before, after).items() if k in forward)


def with_ring(drops: Mapping[str, int], ring: int) -> dict[str, int]:
    """``drops`` with ``ring`` overflows of a receive ring or queue added as ``RING_DROP``."""
    out = dict(drops)
    if ring:
        out[RING_DROP] = out.get(RING_DROP, 0) + ring
    return out


def tester_drops(ring: int) -> dict[str, int]:
    """What the tester's full receive ring lost, as ``TrialResult.tester_drops``."""
    return {RING_DROP: ring} if ring else {}


def unaccounted(r: TrialResult) -> int:
    """Offered packets no count explains: offered - received - DUT drops - tester drops."""
    return r.tx_packets - r.rx_packets - sum(r.dut_drops.values()) - sum(r.tester_drops.values())


def notes(r: TrialResult) -> list[str]:
    """The accounting's notes of a trial: the unaccounted rest, the tester's own losses."""
    out = []
    missing = unaccounted(r)
    if missing:
        out.append(f"{missing} packets unaccounted for (offered - received - counted drops)")
    if r.tester_drops:
        out.append(f"{sum(r.tester_drops.values())} packets lost at the tester's receive ring: the tester, "
                   "not the DUT, dropped them (dut_loss_ratio excludes them)")
    return out


@dataclass(frozen=True)
class Verdicts:
    """Which verdicts the DUT gave a trial's packets, and who counted them."""

    packets: dict[str, int] = field(default_factory=dict)
    """Packets per XDP verdict (``XDP_PASS``: 1000) [packets]."""
    source: str = ""
    """``program``: the program's own counters, named by verdict; ``perfkit``: what perfkit
    counted (received packets under the traffic's verdict, counted drops under XDP_DROP)."""


def verdicts(program_counts: Mapping[str, int], verdict: str, received: int,
             drops: Mapping[str, int]) -> Verdicts:
    """The trial's verdicts: from ``program_counts`` (the rise of the program's counters) where the
    program names counters by verdict (``XDP_DROP``, ``XDP_PASS`` ...: xdp-filter's statistics map),
    else what perfkit counted: ``received`` packets got ``verdict``, the counted ``drops`` XDP_DROP
    (a ring overflow is no verdict: the program never saw those frames)."""
    own = {k: n for k, n in program_counts.items() if k in VERDICTS or k == "XDP_ABORTED"}
    if own:
        return Verdicts({k: n for k, n in own.items() if n}, "program")
    seen = {verdict: received} if received else {}
    dropped = sum(n for k, n in drops.items() if k != RING_DROP)
    if dropped and verdict != "XDP_DROP":
        seen["XDP_DROP"] = seen.get("XDP_DROP", 0) + dropped
    return Verdicts(seen, "perfkit")
