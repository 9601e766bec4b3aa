"""vNet-SLA's ThroughputBinarySearch: single run, best-of-N and worst-of-N.

The algorithm (vNet-SLA, FD.io/OPNFV vsperf 2015):

1. *linear phase*: start at ``start_rate``; while a rate is good, add ``start_step``; at the first
   bad rate the bracket is [last good, first bad]. (If the very first rate is bad, walk down by
   ``start_step`` instead until a rate is good, or the minimum rate is bad.)
2. *binary phase*: halve the step: measure the middle of the bracket, keep the half the verdict
   points to, until the bracket is narrower than ``resolution`` [pps] (or ``relative_width``).

A verdict is one trial for *single run*. *best-of-N* calls a rate bad only after N bad trials
(one good trial is enough for good); *worst-of-N* calls it good only after N good trials: the two
give the highest and the lowest throughput to expect when repeating the test. *majority-of-N*
calls it good when more than half of up to N trials are good (it stops once the vote is decided):
the rate up to which a trial is more likely lossless than not, MLRsearch's exceed ratio 0.5 for
trials of one duration. Where a host makes zero loss near the limit a matter of chance (a VM:
``bench/ndr_repeatability.py``), single-run NDRs scatter over the rates where a trial may or may
not lose; the majority's verdict flips at one rate. They are the same search with another rule.
A rate already judged is not measured again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perfkit.errors import ConfigError
from perfkit.search.judging import is_good, narrow, offered_rate
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.params import check_count, check_positive, check_rate_range, check_ratio, resolve_max_rate
from perfkit.search.result import Bounds, SearchResult, goal_name
from perfkit.search.trials import TrialLog

#: How many trials a verdict takes: ``single`` one; ``best``/``worst``/``majority`` up to N (see
#: module doc).
RULES = ("single", "best", "worst", "majority")
#: Speed-normalized trials in a row that may land outside the bracket before the search stops.
OFF_BRACKET_MAX = 10


@dataclass(frozen=True)
class BinarySearch:
    """Parameters of a vNet-SLA binary search (NDR with ``loss_tolerance`` 0, else a PDR)."""

    loss_tolerance: float = 0.0
    """Highest loss ratio (lost / offered) a good trial may have [1]: 0 for NDR; 0.005, 1e-4,
    1e-6 are common PDRs."""
    duration: float = 2.0
    """Length of every trial [s]."""
    max_rate: float | None = None
    """Highest rate ever offered [pps]; None = 100 % of the scenario's line rate."""
    min_rate: float | None = None
    """Lowest rate ever offered [pps]; None = max_rate / 1000."""
    start_rate: float | None = None
    """First rate of the linear phase [pps]; None = start_step (within min_rate..max_rate)."""
    start_step: float | None = None
    """Step of the linear phase [pps]; None = max_rate / 10."""
    resolution: float | None = None
    """Stop when upper - lower <= this [pps]; None = use ``relative_width``."""
    relative_width: float = 0.005
    """Stop when (upper - lower) / upper <= this [1] (if no ``resolution``)."""
    rule: str = "single"
    """``single``, ``best`` (best-of-N), ``worst`` (worst-of-N) or ``majority`` (majority-of-N)."""
    n: int = 1
    """N of best-of-N / worst-of-N / majority-of-N: trials per verdict at most [1]."""

    def __post_init__(self) -> None:
        check_ratio("loss_tolerance", self.loss_tolerance)
        check_positive("duration", self.duration, "s")
        check_rate_range(self.min_rate, self.max_rate)
        for name in ("start_rate", "start_step", "resolution"):
            check_positive(name, getattr(self, name), "pps", optional=True)
        if not 0 < self.relative_width < 1:
            raise ConfigError("relative_width", self.relative_width, "0 < x < 1")
        if self.rule not in RULES:
            raise ConfigError("rule", self.rule, RULES)
        check_count("n", self.n)
        if self.start_rate is not None:
            if self.max_rate is not None and self.start_rate > self.max_rate:
                raise ConfigError("start_rate", self.start_rate, f"<= max_rate ({self.max_rate:g} pps)")
            if self.min_rate is not None and self.start_rate < self.min_rate:
                raise ConfigError("start_rate", self.start_rate, f">= min_rate ({self.min_rate:g} pps)")

    def resolved(self, measurer: Measurer) -> BinarySearch:
        """A copy with every None rate replaced by its default."""
        top = resolve_max_rate(self.max_rate, measurer)
        low = self.min_rate if self.min_rate is not None else top / 1000
        step = self.start_step if self.start_step is not None else top / 10
        start = self.start_rate if self.start_rate is not None else min(max(step, low), top)
        return dataclasses.replace(self, max_rate=top, min_rate=low, start_step=step, start_rate=start)

    @property
    def label(self) -> str:
        """``ndr``/``pdr0.5%`` for single runs and majorities (the same goal, judged more surely),
        ``best5``/``worst5`` for best/worst-of-N (the two ends of the run-to-run range)."""
        return goal_name(self.loss_tolerance) if self.rule in ("single", "majority") else f"{self.rule}{self.n}"


class _Judge:
    """Gives verdicts (good/bad) at rates according to the rule, remembering each one."""

    def __init__(self, log: TrialLog, params: BinarySearch):
        self.log = log
        self.p = params
        self.memo: dict[float, bool] = {}
        self.normalized = False
        """Whether the last trial was speed-normalized (``perfkit.search.judging``)."""

    def __call__(self, rate: float, phase: str) -> tuple[bool, float]:
        """(good, the rate the verdict holds for) -- lower than ``rate`` if the generator fell short."""
        if self.log.ceiling is not None:
            rate = min(rate, self.log.ceiling)
        if rate in self.memo:
            return self.memo[rate], rate
        asked, votes, landed = rate, [], []
        while (good := _verdict(self.p.rule, self.p.n, votes)) is None:
            trial = self.log.run(asked, self.p.duration, phase)
            # speed-normalized trials land near, not at, the rate asked for: take it as judged
            self.normalized = bool(trial.speed_reference_ns)
            landed.append(offered_rate(trial) if self.normalized else min(asked, offered_rate(trial)))
            votes.append(is_good(trial, self.p.loss_tolerance))
        rate = sum(landed) / len(landed) if self.normalized else min(landed)
        self.memo[rate] = good
        return good, rate


def _verdict(rule: str, n: int, votes: list[bool]) -> bool | None:
    """The verdict of ``votes`` (good trials True) under ``rule``, or None while it is open."""
    good, bad = votes.count(True), votes.count(False)
    if rule == "single":
        return votes[0] if votes else None
    if rule == "best":  # one good decides; bad after n bad
        return True if good else (False if bad >= n else None)
    if rule == "worst":  # one bad decides; good after n good
        return False if bad else (True if good >= n else None)
    if good > n / 2:  # majority: more than half of n good; a tie is bad
        return True
    return False if bad >= n - n // 2 else None


def _linear_phase(judge: _Judge, p: BinarySearch) -> tuple[float | None, float | None]:
    """Walk from start_rate by start_step until a good and a bad rate are adjacent."""
    lower: float | None = None
    upper: float | None = None
    rate = p.start_rate
    while True:
        asked = rate
        good, rate = judge(asked, "linear")
        top = min(p.max_rate, judge.log.ceiling or p.max_rate)
        # the end is the rate asked for, not where the trials landed: at the generator's ceiling (its
        # best offer so far) or speed-normalized, they land a little below the top or above the
        # bottom, and asking for the same end again looped until a verdict flipped
        if good:
            lower = rate
            if upper is not None or max(asked, rate) >= top:
                return lower, upper
            rate = min(rate + p.start_step, top)
        else:
            upper = rate
            if lower is not None or min(asked, rate) <= p.min_rate:
                return lower, upper
            rate = max(rate - p.start_step, p.min_rate)


def _binary_phase(judge: _Judge, p: BinarySearch, lower: float, upper: float,
                  notes: list[str]) -> tuple[float, float]:
    """Halve [lower, upper] until it is narrow enough."""
    misses = 0
    while not narrow(lower, upper, p.relative_width, p.resolution):
        good, rate = judge((lower + upper) / 2, "binary")
        if not lower < rate < upper:
            if not judge.normalized:  # the generator could not offer the middle: stop here
                break
            # the CPU's speed moved a speed-normalized trial off the bracket: it narrows nothing
            # (a good trial below it, a bad one above it) or contradicts it (noise): ask again
            misses += 1
            if misses > OFF_BRACKET_MAX:
                notes.append(f"{p.label}: {misses} trials in a row landed outside the bracket at the reference "
                             "speed (the CPUs' speed moved too much): stopped before the bracket was narrow")
                break
            continue
        misses = 0
        if good:
            lower = rate
        else:
            upper = rate
    return lower, upper


def bracket(log: TrialLog, params: BinarySearch) -> Bounds:
    """Run one binary search through ``log``; ``params`` must be resolved."""
    judge = _Judge(log, params)
    lower, upper = _linear_phase(judge, params)
    notes: list[str] = [f"{params.label}: each rate's verdict is the majority of up to {params.n} trials"
                        ] if params.rule == "majority" else []
    if lower is None:
        notes.append(f"{params.label}: loss above {params.loss_tolerance:g} even at the minimum "
                     f"rate {params.min_rate:.6g} pps")
    elif upper is None:
        notes.append(f"{params.label}: no loss above {params.loss_tolerance:g} up to "
                     f"{lower:.6g} pps, the highest rate tested")
    else:
        lower, upper = _binary_phase(judge, params, lower, upper, notes)
    return Bounds(params.label, params.loss_tolerance, lower, upper, notes)


def binary_search(measurer: Measurer, params: BinarySearch = BinarySearch(), *,
                  on_trial: OnTrial | None = None, progress: bool = False,
                  method: str | None = None) -> SearchResult:
    """vNet-SLA ThroughputBinarySearch (single run, or best/worst-of-N per ``params.rule``).

    ``method`` labels the trials (default ``ndr`` for a zero tolerance, else ``pdr``).
    """
    p = params.resolved(measurer)
    method = method or ("ndr" if p.loss_tolerance == 0 else "pdr")
    with TrialLog(measurer, method, on_trial, progress) as log:
        b = bracket(log, p)
        return log.result(method, b.lower_bound, b.upper_bound, p, goals=[b], notes=b.notes)


def best_worst(measurer: Measurer, params: BinarySearch = BinarySearch(n=5), *,
               on_trial: OnTrial | None = None, progress: bool = False) -> SearchResult:
    """Best-of-N then worst-of-N: ``lower_bound`` = worst-of-N, ``upper_bound`` = best-of-N
    throughput, the run-to-run range (``goals`` holds both brackets)."""
    base = params.resolved(measurer)
    with TrialLog(measurer, "bestworst", on_trial, progress) as log:
        found = []
        for rule in ("best", "worst"):
            log.method = f"bestworst/{rule}{base.n}"
            found.append(bracket(log, dataclasses.replace(base, rule=rule)))
        log.method = "bestworst"
        best, worst = found
        result = log.result("bestworst", worst.lower_bound, best.lower_bound, base,
                            goals=found, notes=best.notes + worst.notes)
        result.params["rule"] = "best, worst"
        return result
