"""Methods that measure at rates fixed in advance: max rate, frame-loss-rate sweep, latency.

- *max rate* (the LB team's "max throughput"): offer the maximum rate, report what comes through.
- *frame-loss-rate sweep* (vNet-SLA FrameLossRate, RFC 2544 frame loss rate): offered load from
  ``start`` to ``stop`` of a nominal rate in ``step``s; every trial keeps loss, latency and DUT CPU.
- *latency at fractions of NDR* (vNet-SLA LatencyAndLatencyVariation): one trial at each fraction
  of a throughput already found, e.g. 10/50/90 % of NDR.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from perfkit.errors import ConfigError, SearchError
from perfkit.search.judging import is_good, offered_rate
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.params import check_count, check_positive, check_ratio, resolve_max_rate
from perfkit.search.limits import LOWER_BOUNDS
from perfkit.search.result import Bounds, LatencyPoint, SearchResult
from perfkit.search.trials import TrialLog
from perfkit.trial import TrialResult


@dataclass(frozen=True)
class MaxRate:
    """Parameters of a max-rate trial."""

    max_rate: float | None = None
    """Rate offered [pps]; None = 100 % of the scenario's line rate."""
    duration: float = 2.0
    """Trial length [s]."""
    trials: int = 1
    """Trials at that rate, one after another: repeats that give a figure its noise (the cost per
    packet ``perfkit explain`` compares, for one) [1]."""

    def __post_init__(self) -> None:
        check_positive("max_rate", self.max_rate, "pps", optional=True)
        check_positive("duration", self.duration, "s")
        check_count("trials", self.trials)


def max_rate(measurer: Measurer, params: MaxRate = MaxRate(), *, on_trial: OnTrial | None = None,
             progress: bool = False) -> SearchResult:
    """Offer ``max_rate`` ``trials`` times: ``lower_bound`` = the received rate, ``upper_bound`` =
    the offered rate [pps], each the median over the trials."""
    p = dataclasses.replace(params, max_rate=resolve_max_rate(params.max_rate, measurer))
    with TrialLog(measurer, "maxrate", on_trial, progress, total=p.trials) as log:
        trials = [log.run(p.max_rate, p.duration, "max") for _ in range(p.trials)]
        return log.result("maxrate", statistics.median(t.rx_pps for t in trials),
                          statistics.median(t.tx_pps for t in trials), p)


@dataclass(frozen=True)
class Sweep:
    """Parameters of a frame-loss-rate sweep; start/stop/step are fractions of ``nominal_rate``."""

    nominal_rate: float | None = None
    """The 100 % the fractions refer to [pps]; None = the scenario's line rate."""
    start: float = 0.1
    """First offered load, a fraction of nominal_rate [1] (0.01 = 1 %)."""
    stop: float = 1.0
    """Last offered load (included if the steps land on it) [1]."""
    step: float = 0.1
    """Increment [1]."""
    duration: float = 2.0
    """Length of every trial [s]."""
    loss_tolerance: float = 0.0
    """Loss ratio up to which a step counts as good when summarising the bounds [1]."""

    def __post_init__(self) -> None:
        for name in ("start", "stop", "step"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ConfigError(name, value, "a fraction of the nominal rate, 0 < x <= 1 (1 = 100 %)")
        if self.stop < self.start:
            raise ConfigError("stop", self.stop, f">= start ({self.start:g})")
        check_positive("nominal_rate", self.nominal_rate, "pps", optional=True)
        check_positive("duration", self.duration, "s")
        check_ratio("loss_tolerance", self.loss_tolerance)

    def fractions(self) -> list[float]:
        """start, start + step, ... up to stop (robust to float steps: 0.1 .. 1.0 gives 10)."""
        count = math.floor((self.stop - self.start) / self.step + 1e-9) + 1
        return [round(self.start + i * self.step, 12) for i in range(count)]


def sweep(measurer: Measurer, params: Sweep = Sweep(), *, on_trial: OnTrial | None = None,
          progress: bool = False) -> SearchResult:
    """One trial per step. ``lower_bound``: the highest step of the good run from ``start`` up,
    ``upper_bound``: the first bad step (None if all were good)."""
    p = dataclasses.replace(params, nominal_rate=resolve_max_rate(params.nominal_rate, measurer))
    fractions = p.fractions()
    lower = upper = None
    with TrialLog(measurer, "sweep", on_trial, progress, total=len(fractions)) as log:
        for fraction in fractions:
            trial = log.run(p.nominal_rate * fraction, p.duration, f"{fraction * 100:g}%")
            if upper is None:
                if is_good(trial, p.loss_tolerance):
                    lower = offered_rate(trial)
                else:
                    upper = offered_rate(trial)
        return log.result("sweep", lower, upper, p)


@dataclass(frozen=True)
class LatencyAt:
    """Parameters of latency trials at fractions of a throughput (NDR) already found."""

    fractions: tuple[float, ...] = (0.1, 0.5, 0.9)
    """Fractions of the throughput to measure at [1]."""
    duration: float = 2.0
    """Length of every trial [s]."""

    def __post_init__(self) -> None:
        if not self.fractions:
            raise ConfigError("fractions", self.fractions, "at least one fraction, 0 < x <= 1")
        for f in self.fractions:
            if not (isinstance(f, (int, float)) and 0 < f <= 1):
                raise ConfigError("fractions", f, "fractions of the throughput, 0 < x <= 1")
        check_positive("duration", self.duration, "s")


def latency_at(measurer: Measurer, throughput: float | SearchResult, params: LatencyAt = LatencyAt(), *,
               on_trial: OnTrial | None = None, progress: bool = False) -> SearchResult:
    """One trial per fraction of ``throughput`` [pps] (or of a result's ``lower_bound``).

    The trials (phase ``10%``, ``50%`` ...) carry the latency percentiles; a ``SearchResult``
    given as throughput has its trials put first, so the result tells the whole story.
    """
    found = throughput if isinstance(throughput, SearchResult) else None
    rate = found.lower_bound if found is not None else throughput
    if rate is None:
        raise SearchError("latency: the search found no throughput to take fractions of "
                          f"({'; '.join(found.notes) if found else 'none given'})")
    check_positive("throughput", rate, "pps")
    with TrialLog(measurer, "latency", on_trial, progress, total=len(params.fractions)) as log:
        for fraction in params.fractions:
            log.run(rate * fraction, params.duration, f"{fraction * 100:g}%")
        result = log.result("latency", rate, found.upper_bound if found else None, params)
    if found is not None:
        result.trials = found.trials + result.trials
        result.goals = found.goals
        result.notes = found.notes + result.notes
        result.wall_seconds += found.wall_seconds
    result.params["throughput"] = rate
    return result


def latency_phase(goal: str, fraction: float) -> str:
    """The phase of a latency trial at ``fraction`` of goal ``goal``: ``latency ndr 100%``."""
    return f"latency {goal} {fraction * 100:g}%"


def latency_at_goals(log: TrialLog, result: SearchResult, fractions: tuple[float, ...], duration: float) -> None:
    """Latency at ``fractions`` of every goal's lower bound, once the search has ended (seed 003's
    methodology 4: latency at the NDR and PDR found).

    One ``duration`` trial per goal and fraction, phase ``latency_phase``; they judge nothing (the
    bounds and what limited them are settled before), and each goal's ``latency`` lists them. A goal
    without a lower bound has no latency. ``result`` gets the trials and the time they took.
    """
    for goal in result.goals:
        if goal.lower_bound is None:
            continue
        for fraction in fractions:
            trial = log.run(goal.lower_bound * fraction, duration, latency_phase(goal.name, fraction))
            goal.latency.append(_point(goal, fraction, trial))
    result.trials = list(log.trials)
    result.wall_seconds = log.wall_seconds


def _point(goal: Bounds, fraction: float, trial: TrialResult) -> LatencyPoint:
    return LatencyPoint(fraction=fraction, rate_pps=goal.lower_bound * fraction, offered_pps=offered_rate(trial),
                        loss_ratio=trial.loss_ratio, latency_ns=dict(trial.latency_ns), ipdv_ns=dict(trial.ipdv_ns),
                        trial_id=trial.trial_id, at_least=goal.limited_by in LOWER_BOUNDS)
