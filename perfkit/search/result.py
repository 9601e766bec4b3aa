"""What a search returns: ``SearchResult`` (the main figure, every trial, the per-goal ``Bounds``)
and the goals' names. Each figure says what limited it (``perfkit.search.limits``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perfkit.search.goals import Goal
from perfkit.trial import TrialResult


@dataclass
class LatencyPoint:
    """Latency measured at a fraction of a goal's throughput, once the search found it."""

    fraction: float
    """Of the goal's lower bound [1] (1.0: at the NDR or PDR itself)."""
    rate_pps: float
    """The rate asked for: ``fraction`` x the lower bound [pps]."""
    offered_pps: float
    """What the generator really offered [pps]."""
    loss_ratio: float
    """The trial's loss (lost / offered) [1]: latency at a rate that lost is still shown, with it."""
    latency_ns: dict[str, float]
    """One-way latency percentiles [ns] (``min``, ``p50``, ``p90``, ``p99``, ``p99.9``, ``max``,
    ``mean``; empty if the generator measures none)."""
    ipdv_ns: dict[str, float]
    """|IPDV| (RFC 3393 delay variation of consecutive packets) percentiles [ns]."""
    trial_id: str
    """The trial measured (one of the result's trials, phase ``latency <goal> <percent>``)."""
    at_least: bool = False
    """The goal's throughput is only a lower bound (what limited it was not the DUT), so this rate is
    a fraction of a lower bound of the NDR/PDR, not of the NDR/PDR itself."""


@dataclass
class Bounds:
    """The bracket one goal (a loss tolerance, or a best/worst-of-N rule) ended with."""

    name: str
    """``ndr``, ``pdr``, ``pdr0.5%``, ``best5``, ``worst5`` ..."""
    loss_tolerance: float
    """Loss ratio (against offered packets) a good trial may have [1]."""
    lower_bound: float | None
    """Highest rate judged good below ``upper_bound`` [pps]; None if even the minimum rate lost."""
    upper_bound: float | None
    """Lowest rate judged bad [pps]; None if nothing up to the maximum rate was bad."""
    notes: list[str] = field(default_factory=list)
    limited_by: str = ""
    """What set the bound (``LIMITS``); filled in when the search ends."""
    reason: str = ""
    """``limited_by``'s evidence, in words: for a loss, what the judged trials at ``upper_bound``
    lost, by the DUT's drop counter (``dut_drops``: ``rx_ring_full`` its receive queue, any other
    its program), and what no counter explains (``loss_reason``)."""
    latency: list[LatencyPoint] = field(default_factory=list)
    """Latency at fractions of ``lower_bound`` (ndrpdr's ``latency_fractions``), measured after the
    search; these trials judge nothing."""
    goal: Goal | None = None
    """The search goal with all its attributes (ndrpdr, mlrsearch: ``perfkit.search.goals``); None
    for searches whose goals have none (binary searches, bestworst)."""
    conditional_throughput: float | None = None
    """Conditional Throughput (draft-ietf-bmwg-mlrsearch) [pps]: the relevant lower bound x (1 - the
    loss ratio at the 1 - exceed ratio quantile of its full-length trials); None without a lower
    bound or a goal."""

    @property
    def relevant_lower_bound(self) -> float | None:
        """Relevant Lower Bound [pps]: ``lower_bound`` under the specification's name."""
        return self.lower_bound

    @property
    def relevant_upper_bound(self) -> float | None:
        """Relevant Upper Bound [pps]: ``upper_bound`` under the specification's name."""
        return self.upper_bound

    @property
    def relative_width(self) -> float | None:
        """(upper - lower) / upper, or None if a bound is missing."""
        if self.lower_bound is None or self.upper_bound is None:
            return None
        return (self.upper_bound - self.lower_bound) / self.upper_bound

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["relative_width"] = self.relative_width
        if self.goal is not None:
            d["relevant_lower_bound"], d["relevant_upper_bound"] = self.lower_bound, self.upper_bound
        return d


@dataclass
class SearchResult:
    """What a search found and every trial it ran to find it (in order)."""

    method: str
    """``maxrate``, ``sweep``, ``ndr``, ``pdr``, ``bestworst``, ``ndrpdr`` or ``latency``."""
    lower_bound: float | None
    """The method's main figure [pps]: throughput (binary searches: the first goal's lower bound;
    maxrate: the received rate; sweep: the highest step before the first lossy one; bestworst:
    worst-of-N)."""
    upper_bound: float | None
    """Its upper companion [pps] (bestworst: best-of-N; maxrate: the offered rate)."""
    trials: list[TrialResult]
    """Every trial, labelled ``<method>/<phase>`` in ``TrialResult.method``."""
    goals: list[Bounds] = field(default_factory=list)
    """Per goal brackets (ndrpdr: one per loss ratio; bestworst: best and worst)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The method parameters, resolved (max_rate filled in)."""
    notes: list[str] = field(default_factory=list)
    """What the reader must know: generator limits, loss at the minimum rate, trial cap hit ..."""
    generator_limited: bool = False
    """True if at least one trial could not be offered at its intended rate."""
    wall_seconds: float = 0.0
    """Time the search took, overheads included [s]."""
    limited_by: str = ""
    """What limited the main figure (``LIMITS``; for searches, the first goal's)."""
    reason: str = ""
    """``limited_by``'s evidence, in words (``Bounds.reason``; for searches, the first goal's)."""

    @property
    def trial_count(self) -> int:
        return len(self.trials)

    @property
    def stalled_trials(self) -> int:
        """Trials during which a DUT core stalled as long as its queue lasts: each run again (or
        judged with its loss, once retries ran out)."""
        return sum(1 for t in self.trials if t.stalled)

    @property
    def disturbed_trials(self) -> int:
        """Stalled trials whose loss host stalls explained."""
        return sum(1 for t in self.trials if t.disturbed)

    @property
    def disturbed_seconds(self) -> float:
        """Traffic time of the disturbed trials [s]: what the stalls cost the search."""
        return sum(t.duration for t in self.trials if t.disturbed)

    @property
    def trial_seconds(self) -> float:
        """Sum of the trials' intended durations [s] (traffic time, without overheads)."""
        return sum(t.duration for t in self.trials)

    def goal(self, name: str) -> Bounds:
        """The bracket called ``name`` (``ndr``, ``pdr``, ``best5`` ...)."""
        for b in self.goals:
            if b.name == name:
                return b
        raise KeyError(f"{name!r} not in {[b.name for b in self.goals]}")

    def to_dict(self, with_trials: bool = True) -> dict[str, Any]:
        """JSON-ready: bounds, counts, goals, params, notes and (optionally) every trial."""
        d: dict[str, Any] = {
            "method": self.method, "lower_bound": self.lower_bound, "upper_bound": self.upper_bound,
            "trial_count": self.trial_count, "trial_seconds": self.trial_seconds,
            "stalled_trials": self.stalled_trials,
            "disturbed_trials": self.disturbed_trials, "disturbed_seconds": self.disturbed_seconds,
            "wall_seconds": self.wall_seconds, "generator_limited": self.generator_limited,
            "limited_by": self.limited_by, "reason": self.reason,
            "goals": [g.to_dict() for g in self.goals], "params": dict(self.params),
            "notes": list(self.notes),
        }
        if with_trials:
            d["trials"] = [trial_dict(t) for t in self.trials]
        return d


def trial_dict(trial: TrialResult) -> dict[str, Any]:
    """``TrialResult.to_dict`` plus ``phase`` split off the ``<method>/<phase>`` label."""
    d = trial.to_dict()
    d["phase"] = trial.method.partition("/")[2]
    return d


def goal_name(loss_tolerance: float) -> str:
    """``ndr`` for 0, else ``pdr<percent>%`` (e.g. ``pdr0.5%``)."""
    return "ndr" if loss_tolerance == 0 else f"pdr{loss_tolerance * 100:g}%"
