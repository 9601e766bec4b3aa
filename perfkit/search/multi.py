"""NDR and several PDRs in one search: short trials to bracket, full-length trials to confirm.

The idea is FD.io CSIT's MLRsearch (RFC 9971, draft-ietf-bmwg-mlrsearch): several search goals
share every trial, and trials are short until the interval is narrow. Goals have the
specification's attributes (``perfkit.search.goals``: loss ratio, exceed ratio, initial and final
trial duration, duration sum, width) and loads are classified by its rules; the search itself is
perfkit's own:

1. *max*: one short trial at the maximum rate. Its forwarding rate F is the first guess of every
   goal's throughput: F / (1 - goal) (a DUT forwarding F pps when overloaded usually has its NDR
   near F).
2. *short*: for the strictest unfinished goal, short (initial trial duration) trials: first just
   below its guess, then *expand* away from it in log-rate steps that double (one width, two,
   four ...) until the verdict flips, then *bisect* in log space. Each trial classifies every goal
   at once (bad for NDR can be good for a PDR). A bad trial gives a new guess (its forwarding
   rate, corrected for the goal) that the expansion jumps to when it is further. With the old
   goals short trials for every goal come before any confirmation; with an exceed ratio or a
   duration sum, the least strict goal goes first and is settled before the next one.
3. *confirm*: once a goal's bracket is narrower than its width, one final-duration trial at its
   lower rate (a load of its own). Where one trial cannot classify a load (an exceed ratio above
   0, or a duration sum above the final trial duration), the search *repeats* trials at the same
   load -- full-length ones at the lower load, at the bad load above it short or full-length ones,
   whichever can settle it -- until the lower load is a lower bound and the bad one an upper
   bound, or a verdict flips and the bracket moves. A confirmation that fails for a goal with
   exceed ratio 0 makes its rate the upper bound, and the goal goes on from just below it (a noisy
   DUT). After ``LONG_AFTER`` failed confirmations short trials are taken to be optimistic (a DUT
   whose buffers hide loss in short trials): a short trial then only *probes* (bad: a bad load;
   good: repeated at full duration, ``long``), and once a good probe proves wrong, only
   full-duration trials are run.

Bounds are the specification's: a goal's *relevant upper bound* is the lowest load classified as
an upper bound; its *relevant lower bound* the highest load below it classified as a lower bound
(so loss inversion never yields a lower bound above an upper bound), and the *conditional
throughput* is taken at the relevant lower bound. With the old goals (a bare loss ratio: exceed
ratio 0, duration sum = final trial duration) any bad trial makes an upper bound and one good
full-length trial a lower bound: the search runs exactly as before goals had attributes. Rates are
judged at the offered rate; a trial is filed under the load it repeats if it landed within half
the narrowest width of it, else it is a load of its own. A generator that falls short caps the
search (``generator_limited``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from perfkit.errors import ConfigError
from perfkit.search.judging import RATE_EPS, is_good, narrow, offered_rate
from perfkit.search.limits import OFFER_SHORTFALL
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.goals import Goal, GoalParams, LoadStat, goal_stat
from perfkit.search.params import check_count, check_positive
from perfkit.search.result import Bounds, SearchResult, goal_name
from perfkit.search.simple import latency_at_goals
from perfkit.search.trials import TrialLog
from perfkit.trial import TrialResult

#: Failed confirmations of a goal after which its short good trials are no longer trusted.
LONG_AFTER = 2


@dataclass(frozen=True)
class NdrPdr(GoalParams):
    """Parameters of a multi-goal (NDR + PDRs) search: the goals (``GoalParams``) and these."""

    max_trials: int = 200
    """Safety stop: give up (with a note) after this many trials [1]."""
    latency_fractions: tuple[float, ...] = ()
    """Once the search ends, measure latency at these fractions of every goal's throughput (1.0: at
    the NDR and PDR themselves) [1]; empty: none."""
    latency_duration: float | None = None
    """Length of every latency trial [s]; None = ``final_duration``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("max_trials", self.max_trials)
        for f in self.latency_fractions:
            if not (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1):
                raise ConfigError("latency_fractions", f, "fractions of the throughput found, 0 < x <= 1")
        if len(set(self.latency_fractions)) != len(self.latency_fractions):
            raise ConfigError("latency_fractions", self.latency_fractions, "distinct fractions")
        if self.latency_duration is not None:
            check_positive("latency_duration", self.latency_duration, "s")

    def resolved(self, measurer: Measurer) -> NdrPdr:
        """A copy with the rate defaults filled in and the goals sorted, strictest first."""
        return dataclasses.replace(self, **self.resolved_rates(measurer))


@dataclass(frozen=True)
class _Obs:
    """One trial as the search sees it."""

    rate: float
    """Offered rate [pps]."""
    loss: float
    """Loss ratio [1]."""
    duration: float
    """Its intended duration [s]."""
    forwarding: float
    """rate x (1 - loss) [pps]."""
    load: float
    """The load it is filed under [pps]: its own rate, or the load it repeated (``_Search.measure``)."""


@dataclass
class _Goal:
    """Search state of one goal."""

    goal: Goal
    """The goal, every attribute resolved."""
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

    @property
    def loss(self) -> float:
        return self.goal.loss_ratio

    @property
    def unit(self) -> float:
        """The goal width as a log-rate distance: ln(upper / lower) at the target width."""
        return -math.log1p(-self.goal.relative_width)


@dataclass
class _Load:
    """The trials filed under one load, as one goal sees them."""

    rate: float
    """The load [pps]."""
    stat: LoadStat
    forwarding: float
    """Mean forwarding rate of its bad trials (of all, when none is bad) [pps]."""

    @property
    def kind(self) -> str:
        """``lower``, ``upper`` or ``open`` (``LoadStat.classification``)."""
        return self.stat.classification

    @property
    def bad(self) -> bool:
        return self.stat.leans_bad


def _loads(obs: list[_Obs], goal: Goal) -> list[_Load]:
    """Every load the trials were filed under, in rate order, classified for ``goal``."""
    by_load: dict[float, list[_Obs]] = {}
    for o in obs:
        by_load.setdefault(o.load, []).append(o)
    loads = []
    for rate, trials in sorted(by_load.items()):
        stat = goal_stat(goal, ((o.duration, o.loss) for o in trials))
        bad = [o.forwarding for o in trials if o.loss > goal.loss_ratio] or [o.forwarding for o in trials]
        loads.append(_Load(rate, stat, sum(bad) / len(bad)))
    return loads


@dataclass
class _View:
    """What the observations say about one goal."""

    hi: _Load | None = None
    """Lowest load leaning bad (an upper bound, or where the bad seconds so far outweigh what the
    exceed ratio allows)."""
    lo: float | None = None
    """Highest load below ``hi`` classified a lower bound [pps]."""
    plo: _Load | None = None
    """Highest load below ``hi`` leaning good that counts for the goal (short-only ones too,
    unless long_only)."""


def _view(obs: list[_Obs], goal: _Goal) -> _View:
    loads = _loads(obs, goal.goal)
    hi = next((ld for ld in loads if ld.bad), None)
    good = [ld for ld in loads if not ld.bad and (hi is None or ld.rate < hi.rate)]
    lo = max((ld.rate for ld in good if ld.kind == "lower"), default=None)
    counted = [ld for ld in good if ld.stat.good_long > 0] if goal.long_only else good
    return _View(hi, lo, max(counted, key=lambda ld: ld.rate, default=None))


def relevant_bounds(loads: list[_Load]) -> tuple[_Load | None, _Load | None]:
    """(relevant lower bound, relevant upper bound): the lowest load classified an upper bound,
    and the highest classified a lower bound below it (None where there is none)."""
    upper = next((ld for ld in loads if ld.kind == "upper"), None)
    lower = max((ld for ld in loads if ld.kind == "lower" and (upper is None or ld.rate < upper.rate)),
                key=lambda ld: ld.rate, default=None)
    return lower, upper


@dataclass
class _Search:
    """The state of one ndrpdr search: the observations so far and each goal's expansion state."""

    p: NdrPdr
    log: TrialLog
    goals: list[_Goal] = field(init=False)
    obs: list[_Obs] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.goals = [_Goal(g) for g in self.p.search_goals()]

    @property
    def top(self) -> float:
        return min(self.p.max_rate, self.log.ceiling or self.p.max_rate)

    @property
    def _tolerance(self) -> float:
        """How far [log rate] a repeat may land from the load it repeats and still count there:
        half the narrowest goal width."""
        return min(g.unit for g in self.goals) / 2

    def measure(self, rate: float, duration: float, phase: str, load: float | None = None) -> TrialResult:
        """A trial at ``rate``; ``load``: it repeats that load, and is filed under it if it landed
        within ``_tolerance`` of it (else, like any other, under its own offered rate)."""
        trial = self.log.run(rate, duration, phase)
        offered = offered_rate(trial)
        at = load if load is not None and abs(math.log(offered / load)) <= self._tolerance else offered
        self.obs.append(_Obs(offered, trial.dut_loss_ratio, duration, offered * (1 - trial.dut_loss_ratio), at))
        return trial

    # -- per goal decisions ------------------------------------------------------------------
    def failed(self, v: _View) -> bool:
        """Whether the goal was missed even at the minimum rate."""
        return v.hi is not None and v.hi.kind == "upper" and v.hi.rate <= self.p.min_rate * (1 + RATE_EPS)

    def finished(self, goal: _Goal, v: _View) -> bool:
        return self.failed(v) or (v.lo is not None and self._closed(goal, v.lo, v.hi)
                                  and (v.hi is None or v.hi.kind == "upper"))

    def _closed(self, goal: _Goal, lower: float, hi: _Load | None) -> bool:
        if hi is None:
            # at the generator's ceiling, what it offers wanders a few % below it from trial to
            # trial: within that is at the top (else confirmations at the ceiling never end)
            slack = OFFER_SHORTFALL if self.log.ceiling is not None and self.top >= self.log.ceiling else RATE_EPS
            return lower >= self.top * (1 - slack)
        return narrow(lower, hi.rate, goal.goal.relative_width)

    @staticmethod
    def guess(goal: _Goal, v: _View) -> float | None:
        """The goal's throughput as the lowest bad load's forwarding rate suggests, a bit below."""
        if v.hi is None:
            return None
        return v.hi.forwarding / (1 - goal.loss) * math.exp(-goal.unit / 2)

    def candidate(self, goal: _Goal, v: _View) -> float:
        """Next rate [pps] for a goal whose bracket is not yet narrow: the guess first, then
        doubling expansions from the anchor, then log-space bisection."""
        unit, guess = goal.unit, self.guess(goal, v)
        plo, hi = v.plo.rate if v.plo else None, v.hi.rate if v.hi else None
        if goal.anchor is None and guess is not None and self._inside(goal, guess, plo, hi):
            return guess
        if goal.anchor is None or not self._anchor_valid(goal, plo, hi):
            goal.anchor, goal.anchor_good, goal.steps = (plo, True, 0) if plo is not None else (hi, False, 0)
        step = min(unit * 2 ** goal.steps, 50.0)  # e^50: far beyond any rate range
        rate = goal.anchor * math.exp(step if goal.anchor_good else -step)
        if guess is not None and self._inside(goal, guess, plo, hi) and (
                guess > rate if goal.anchor_good else guess < rate):
            rate = guess  # the guess is further along the way: jump there
        if plo is not None and hi is not None:
            width = math.log(hi / plo)
            if goal.bisecting or not self._inside(goal, rate, plo, hi) or step >= width / 2:
                rate = math.sqrt(plo * hi)
        return min(max(rate, self.p.min_rate), self.top)

    @staticmethod
    def _inside(goal: _Goal, rate: float, plo: float | None, hi: float | None) -> bool:
        """Whether ``rate`` is at least half a width away from both known bounds."""
        margin = math.exp(goal.unit / 2)
        return (plo is None or rate >= plo * margin) and (hi is None or rate * margin <= hi)

    @staticmethod
    def _anchor_valid(goal: _Goal, plo: float | None, hi: float | None) -> bool:
        """An anchor must lie on its own side (noise can put a good trial above a bad one)."""
        if goal.anchor_good:
            return hi is None or goal.anchor < hi
        return plo is None or goal.anchor > plo

    @staticmethod
    def after(goal: _Goal, rate: float, good: bool) -> None:
        """Move the goal's expansion anchor after a trial chosen for it."""
        if goal.anchor is None:
            goal.anchor, goal.anchor_good, goal.steps = rate, good, 0
        elif good != goal.anchor_good:
            goal.bisecting = True  # the verdict flipped: the bracket is found
        else:
            goal.anchor, goal.steps = rate, goal.steps + 1

    def _classify(self, goal: _Goal, v: _View) -> tuple[float, float, str, float | None] | None:
        """(rate, duration, phase, load repeated) of the trial that settles a goal whose bracket
        is narrow (or whose bad load is at the minimum rate), or None while it is not: a first
        full-length trial at the lower load (``confirm``, a load of its own), more full-length
        seconds there until it is a lower bound, or more seconds at the bad load until it is an
        upper bound (``repeat``; with the old goals one trial settles either, so never)."""
        g = goal.goal
        if v.hi is not None and v.hi.kind != "upper" and v.hi.rate <= self.p.min_rate * (1 + RATE_EPS):
            return v.hi.rate, v.hi.stat.upper_seconds_needed(), "repeat", v.hi.rate
        if v.plo is None or not self._closed(goal, v.plo.rate, v.hi):
            return None
        if v.plo.kind == "lower":  # the lower bound is there; the load above is not an upper bound yet
            return v.hi.rate, v.hi.stat.upper_seconds_needed(), "repeat", v.hi.rate
        if v.plo.stat.good_long + v.plo.stat.bad_long > 0:
            return v.plo.rate, g.final_trial_duration, "repeat", v.plo.rate
        return v.plo.rate, g.final_trial_duration, "confirm", None

    # -- the loop ----------------------------------------------------------------------------
    def next_trial(self) -> tuple[float, float, str, _Goal | None, float | None] | None:
        """(rate, duration, phase, goal it is for, load it repeats) or None when every goal is
        finished. With the old goals, the strictest goal first, and short trials for every goal
        before any confirmation (of those, the lowest rate first). Where a goal has an exceed
        ratio or a duration sum, the least strict goal first, each settled before the next one is
        bracketed: a strict goal the host never lets pass (an NDR through stalls) does not spend
        the trials the others need."""
        settle: list[tuple[float, float, str, float | None]] = []
        legacy = all(g.goal.legacy for g in self.goals)
        for goal in self.goals if legacy else reversed(self.goals):
            v = _view(self.obs, goal)
            if self.finished(goal, v):
                continue
            if (nxt := self._classify(goal, v)) is not None:
                if not legacy:
                    rate, duration, phase, load = nxt
                    return rate, duration, phase, None, load
                settle.append(nxt)
                continue
            g = goal.goal
            if not goal.long_only:
                return self.candidate(goal, v), g.initial_trial_duration, "short", goal, None
            if goal.probe:
                return self.candidate(goal, v), g.initial_trial_duration, "probe", goal, None
            return self.candidate(goal, v), g.final_trial_duration, "long", goal, None
        if settle:
            rate, duration, phase, load = min(settle, key=lambda s: (s[0], s[2]))
            return rate, duration, phase, None, load
        return None

    def run(self) -> list[Bounds]:
        self.measure(self.top, min(g.goal.initial_trial_duration for g in self.goals), "max")
        notes: list[str] = []
        while True:
            if len(self.log.trials) >= self.p.max_trials:
                notes.append(f"stopped after max_trials={self.p.max_trials} trials; bounds are partial")
                break
            nxt = self.next_trial()
            if nxt is None:
                break
            rate, duration, phase, goal, load = nxt
            trial = self.measure(rate, duration, phase, load)
            if goal is None:
                if phase == "confirm":
                    self._after_confirm(self.obs[-1])
                continue
            good = is_good(trial, goal.loss)
            if good and phase == "probe":  # a short good trial is not trusted here: go long
                good = is_good(self.measure(self.obs[-1].rate, goal.goal.final_trial_duration, "long"), goal.loss)
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
                final = goal.goal.final_trial_duration * (1 - RATE_EPS)
                contradicted = any(p.loss <= goal.loss and p.duration < final and p.rate >= o.rate for p in self.obs)
                if contradicted and (v.lo is None or v.lo < o.rate):
                    goal.failures += 1
                    goal.long_only = goal.failures >= LONG_AFTER
                    goal.bisecting = False
                    goal.anchor, goal.anchor_good, goal.steps = o.rate, False, 0

    def _bounds(self, goal: _Goal, notes: list[str]) -> Bounds:
        lower, upper = relevant_bounds(_loads(self.obs, goal.goal))
        g = goal.goal
        name = goal_name(goal.loss)
        b = Bounds(name, goal.loss, lower.rate if lower else None, upper.rate if upper else None, list(notes),
                   goal=g, conditional_throughput=(lower.rate * (1 - lower.stat.pessimistic_loss_ratio)
                                                   if lower else None))
        if upper is not None and upper.rate <= self.p.min_rate * (1 + RATE_EPS):
            b.lower_bound = b.conditional_throughput = None
            b.notes.append(f"{name}: loss above {goal.loss:g} even at the minimum rate "
                           f"{self.p.min_rate:.6g} pps")
        elif upper is None and lower is not None:
            b.notes.append(f"{name}: no loss above {goal.loss:g} up to {lower.rate:.6g} pps, the highest "
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
