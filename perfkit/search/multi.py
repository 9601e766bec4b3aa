"""NDR and several PDRs in one search: short trials to bracket, one full-duration trial to confirm.

The idea is FD.io CSIT's MLRsearch (RFC 9971): several loss-ratio goals share every trial, and
trials are short until the interval is narrow. The design here is perfkit's own:

1. *max*: one short trial at the maximum rate. Its forwarding rate F is the first guess of every
   goal's throughput: F / (1 - goal) (a DUT forwarding F pps when overloaded usually has its NDR
   near F).
2. *short*: for the strictest unfinished goal, short (``initial_duration``) trials: first just
   below its guess, then *expand* away from it in log-rate steps that double (one width, two,
   four ...) until the verdict flips, then *bisect* in log space. Each trial classifies every goal
   at once (bad for NDR can be good for a PDR). A bad trial gives a new guess (its forwarding
   rate, corrected for the goal) that the expansion jumps to when it is further. Short trials for
   every goal come before any confirmation.
3. *confirm*: once a goal's bracket is narrower than ``relative_width``, one ``final_duration``
   trial at its lower rate. If it is good, that is the goal's lower bound; if not, that rate becomes
   the upper bound and the goal goes on from just below it (a noisy DUT). After ``LONG_AFTER``
   failed confirmations short trials are taken to be optimistic (a DUT whose buffers hide loss in
   short trials): a short trial then only *probes* (bad: an upper bound; good: repeated at full
   duration, ``long``), and once a good probe proves wrong, only full-duration trials are run.

Bounds: a goal's upper bound is its lowest bad rate (any duration); its lower bound the highest
rate below that with a good full-duration trial (so a load with both counts as bad, and loss
inversion never yields a lower bound above a bad rate). Rates are judged at the offered rate; a
generator that falls short caps the search (``generator_limited``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from perfkit.errors import ConfigError
from perfkit.search.judging import RATE_EPS, is_good, narrow, offered_rate
from perfkit.search.limits import OFFER_SHORTFALL
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.params import check_positive, check_rate_range, check_ratio, resolve_max_rate
from perfkit.search.result import Bounds, SearchResult, goal_name
from perfkit.search.simple import latency_at_goals
from perfkit.search.trials import TrialLog
from perfkit.trial import TrialResult

#: Failed confirmations of a goal after which its short good trials are no longer trusted.
LONG_AFTER = 2


@dataclass(frozen=True)
class NdrPdr:
    """Parameters of a multi-goal (NDR + PDRs) search."""

    goals: tuple[float, ...] = (0.0, 0.005)
    """Loss ratios (lost / offered) to find the throughput for [1]; 0 is NDR."""
    relative_width: float = 0.005
    """Stop a goal when (upper - lower) / upper <= this [1]."""
    initial_duration: float = 1.0
    """Length of the short bracketing trials [s]."""
    final_duration: float = 10.0
    """Length of the confirmation trials; lower bounds rest on these [s]."""
    max_rate: float | None = None
    """Highest rate offered [pps]; None = 100 % of the scenario's line rate."""
    min_rate: float | None = None
    """Lowest rate offered [pps]; None = max_rate / 1000."""
    max_trials: int = 200
    """Safety stop: give up (with a note) after this many trials [1]."""
    latency_fractions: tuple[float, ...] = ()
    """Once the search ends, measure latency at these fractions of every goal's throughput (1.0: at
    the NDR and PDR themselves) [1]; empty: none."""
    latency_duration: float | None = None
    """Length of every latency trial [s]; None = ``final_duration``."""

    def __post_init__(self) -> None:
        if not self.goals:
            raise ConfigError("goals", self.goals, "at least one loss ratio, 0 <= x < 1")
        for g in self.goals:
            check_ratio("goals", g)
        if len(set(self.goals)) != len(self.goals):
            raise ConfigError("goals", self.goals, "distinct loss ratios")
        if not 0 < self.relative_width < 1:
            raise ConfigError("relative_width", self.relative_width, "0 < x < 1")
        check_positive("initial_duration", self.initial_duration, "s")
        check_positive("final_duration", self.final_duration, "s")
        if self.initial_duration > self.final_duration:
            raise ConfigError("initial_duration", self.initial_duration,
                              f"<= final_duration ({self.final_duration:g} s)")
        check_rate_range(self.min_rate, self.max_rate)
        if not (isinstance(self.max_trials, int) and self.max_trials >= 1):
            raise ConfigError("max_trials", self.max_trials, "an integer >= 1")
        for f in self.latency_fractions:
            if not (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1):
                raise ConfigError("latency_fractions", f, "fractions of the throughput found, 0 < x <= 1")
        if len(set(self.latency_fractions)) != len(self.latency_fractions):
            raise ConfigError("latency_fractions", self.latency_fractions, "distinct fractions")
        if self.latency_duration is not None:
            check_positive("latency_duration", self.latency_duration, "s")

    def resolved(self, measurer: Measurer) -> NdrPdr:
        """A copy with the rate defaults filled in and the goals sorted, strictest first."""
        top = resolve_max_rate(self.max_rate, measurer)
        return dataclasses.replace(self, max_rate=top, goals=tuple(sorted(self.goals)),
                                   min_rate=self.min_rate if self.min_rate is not None else top / 1000)

    @property
    def unit(self) -> float:
        """The relative width as a log-rate distance: ln(upper / lower) at the target width."""
        return -math.log1p(-self.relative_width)


@dataclass(frozen=True)
class _Obs:
    """One trial as the search sees it."""

    rate: float
    """Offered rate [pps]."""
    loss: float
    """Loss ratio [1]."""
    full: bool
    """Whether it lasted the final duration."""
    forwarding: float
    """rate x (1 - loss) [pps]."""


@dataclass
class _Goal:
    """Search state of one loss-ratio goal."""

    loss: float
    """The goal's loss ratio [1]."""
    failures: int = 0
    """Confirmations that failed so far."""
    long_only: bool = False
    """Set after ``LONG_AFTER`` failed confirmations (short trials look optimistic): short good
    trials no longer count, so a short trial only probes (a bad one is an upper bound) and a good
    probe is repeated at full duration."""
    anchor: float | None = None
    """Rate of the goal's last expansion trial [pps]."""
    anchor_good: bool = False
    steps: int = 0
    """Expansions so far from the anchor (the next one is 2**steps widths)."""
    bisecting: bool = False
    """Set once the goal's own trials flipped verdict: from then on only bisection."""
    probe: bool = True
    """In long_only mode: probe with a short trial first (cleared once a probe proved optimistic)."""


@dataclass
class _View:
    """What the observations say about one goal."""

    hi: _Obs | None = None
    """Lowest bad trial."""
    lo: float | None = None
    """Highest full-duration good rate below ``hi`` [pps]."""
    plo: float | None = None
    """Highest good rate below ``hi`` that counts for the goal (short ones too, unless long_only)."""


def _view(obs: list[_Obs], goal: _Goal) -> _View:
    bad = [o for o in obs if o.loss > goal.loss]
    hi = min(bad, key=lambda o: o.rate) if bad else None
    good = [o for o in obs if o.loss <= goal.loss and (hi is None or o.rate < hi.rate)]
    lo = max((o.rate for o in good if o.full), default=None)
    plo = lo if goal.long_only else max((o.rate for o in good), default=None)
    return _View(hi, lo, plo)


@dataclass
class _Search:
    """The state of one ndrpdr search: the observations so far and each goal's expansion state."""

    p: NdrPdr
    log: TrialLog
    goals: list[_Goal] = field(init=False)
    obs: list[_Obs] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.goals = [_Goal(g) for g in self.p.goals]

    @property
    def top(self) -> float:
        return min(self.p.max_rate, self.log.ceiling or self.p.max_rate)

    def measure(self, rate: float, duration: float, phase: str) -> TrialResult:
        trial = self.log.run(rate, duration, phase)
        offered = offered_rate(trial)
        full = duration >= self.p.final_duration * (1 - RATE_EPS)
        self.obs.append(_Obs(offered, trial.dut_loss_ratio, full, offered * (1 - trial.dut_loss_ratio)))
        return trial

    # -- per goal decisions ------------------------------------------------------------------
    def failed(self, v: _View) -> bool:
        """Whether the goal was missed even at the minimum rate."""
        return v.hi is not None and v.hi.rate <= self.p.min_rate * (1 + RATE_EPS)

    def finished(self, v: _View) -> bool:
        return self.failed(v) or (v.lo is not None and self._closed(v.lo, v.hi))

    def _closed(self, lower: float, hi: _Obs | None) -> bool:
        if hi is None:
            # at the generator's ceiling, what it offers wanders a few % below it from trial to
            # trial: within that is at the top (else confirmations at the ceiling never end)
            slack = OFFER_SHORTFALL if self.log.ceiling is not None and self.top >= self.log.ceiling else RATE_EPS
            return lower >= self.top * (1 - slack)
        return narrow(lower, hi.rate, self.p.relative_width)

    def guess(self, goal: _Goal, v: _View) -> float | None:
        """The goal's throughput as the lowest bad trial's forwarding rate suggests, a bit below."""
        if v.hi is None:
            return None
        return v.hi.forwarding / (1 - goal.loss) * math.exp(-self.p.unit / 2)

    def candidate(self, goal: _Goal, v: _View) -> float:
        """Next rate [pps] for a goal whose bracket is not yet narrow: the guess first, then
        doubling expansions from the anchor, then log-space bisection."""
        unit, guess = self.p.unit, self.guess(goal, v)
        plo, hi = v.plo, v.hi.rate if v.hi else None
        if goal.anchor is None and guess is not None and self._inside(guess, plo, hi):
            return guess
        if goal.anchor is None or not self._anchor_valid(goal, plo, hi):
            goal.anchor, goal.anchor_good, goal.steps = (plo, True, 0) if plo is not None else (hi, False, 0)
        step = min(unit * 2 ** goal.steps, 50.0)  # e^50: far beyond any rate range
        rate = goal.anchor * math.exp(step if goal.anchor_good else -step)
        if guess is not None and self._inside(guess, plo, hi) and (
                guess > rate if goal.anchor_good else guess < rate):
            rate = guess  # the guess is further along the way: jump there
        if plo is not None and hi is not None:
            width = math.log(hi / plo)
            if goal.bisecting or not self._inside(rate, plo, hi) or step >= width / 2:
                rate = math.sqrt(plo * hi)
        return min(max(rate, self.p.min_rate), self.top)

    def _inside(self, rate: float, plo: float | None, hi: float | None) -> bool:
        """Whether ``rate`` is at least half a width away from both known bounds."""
        margin = math.exp(self.p.unit / 2)
        return (plo is None or rate >= plo * margin) and (hi is None or rate * margin <= hi)

    @staticmethod
    def _anchor_valid(goal: _Goal, plo: float | None, hi: float | None) -> bool:
        """An anchor must lie on its own side (noise can put a good trial above a bad one)."""
        if goal.anchor_good:
            return hi is None or goal.anchor < hi
        return plo is None or goal.anchor > plo

    def after(self, goal: _Goal, rate: float, good: bool) -> None:
        """Move the goal's expansion anchor after a trial chosen for it."""
        if goal.anchor is None:
            goal.anchor, goal.anchor_good, goal.steps = rate, good, 0
        elif good != goal.anchor_good:
            goal.bisecting = True  # the verdict flipped: the bracket is found
        else:
            goal.anchor, goal.steps = rate, goal.steps + 1

    # -- the loop ----------------------------------------------------------------------------
    def next_trial(self) -> tuple[float, float, str, _Goal | None] | None:
        """(rate, duration, phase, goal it is for) or None when every goal is finished."""
        confirms: list[float] = []
        for goal in self.goals:
            v = _view(self.obs, goal)
            if self.finished(v):
                continue
            if v.plo is not None and self._closed(v.plo, v.hi):
                confirms.append(v.plo)
                continue
            if not goal.long_only:
                return self.candidate(goal, v), self.p.initial_duration, "short", goal
            if goal.probe:
                return self.candidate(goal, v), self.p.initial_duration, "probe", goal
            return self.candidate(goal, v), self.p.final_duration, "long", goal
        if confirms:
            return min(confirms), self.p.final_duration, "confirm", None
        return None

    def run(self) -> list[Bounds]:
        self.measure(self.top, self.p.initial_duration, "max")
        notes: list[str] = []
        while True:
            if len(self.log.trials) >= self.p.max_trials:
                notes.append(f"stopped after max_trials={self.p.max_trials} trials; bounds are partial")
                break
            nxt = self.next_trial()
            if nxt is None:
                break
            rate, duration, phase, goal = nxt
            trial = self.measure(rate, duration, phase)
            if goal is None:
                self._after_confirm(self.obs[-1])
                continue
            good = is_good(trial, goal.loss)
            if good and phase == "probe":  # a short good trial is not trusted here: go long
                good = is_good(self.measure(self.obs[-1].rate, self.p.final_duration, "long"), goal.loss)
                goal.probe = goal.probe and good
            self.after(goal, self.obs[-1].rate, good)
        return [self._bounds(goal, notes) for goal in self.goals]

    def _after_confirm(self, o: _Obs) -> None:
        """A failed confirmation switches the goals it failed for to full-duration trials -- if a
        short trial was good at or above its rate (a speed-normalized confirmation can land above
        every good short trial: then it only lowers the upper bound)."""
        for goal in self.goals:
            if o.loss > goal.loss and not goal.long_only:
                v = _view(self.obs, goal)
                contradicted = any(p.loss <= goal.loss and not p.full and p.rate >= o.rate for p in self.obs)
                if contradicted and (v.lo is None or v.lo < o.rate):
                    goal.failures += 1
                    goal.long_only = goal.failures >= LONG_AFTER
                    goal.bisecting = False
                    goal.anchor, goal.anchor_good, goal.steps = o.rate, False, 0

    def _bounds(self, goal: _Goal, notes: list[str]) -> Bounds:
        v = _view(self.obs, goal)
        name = goal_name(goal.loss)
        b = Bounds(name, goal.loss, v.lo, v.hi.rate if v.hi else None, list(notes))
        if self.failed(v):
            b.lower_bound = None
            b.notes.append(f"{name}: loss above {goal.loss:g} even at the minimum rate "
                           f"{self.p.min_rate:.6g} pps")
        elif v.hi is None and v.lo is not None:
            b.notes.append(f"{name}: no loss above {goal.loss:g} up to {v.lo:.6g} pps, the highest "
                           "rate tested" + (" (generator-limited)" if self.log.ceiling else ""))
        return b


def ndrpdr(measurer: Measurer, params: NdrPdr = NdrPdr(), *, on_trial: OnTrial | None = None,
           progress: bool = False) -> SearchResult:
    """NDR and PDRs in one search (see module doc). ``lower_bound``/``upper_bound`` are the
    strictest goal's (NDR's); ``goals`` holds one bracket per loss ratio, and the latency measured
    at ``latency_fractions`` of it once the search has ended."""
    p = params.resolved(measurer)
    with TrialLog(measurer, "ndrpdr", on_trial, progress) as log:
        bounds = _Search(p, log).run()
        notes = sorted({n for b in bounds for n in b.notes})
        result = log.result("ndrpdr", bounds[0].lower_bound, bounds[0].upper_bound, p, goals=bounds, notes=notes)
        latency_at_goals(log, result, p.latency_fractions, p.latency_duration or p.final_duration)
        return result
