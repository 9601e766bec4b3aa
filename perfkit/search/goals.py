"""Search goals as draft-ietf-bmwg-mlrsearch defines them, and how trials at one load classify it.

A *search goal* (the specification's section 4.6) has six attributes:

- ``loss_ratio`` (Goal Loss Ratio): a trial whose loss ratio is above it is a *bad* trial, else good;
- ``exceed_ratio`` (Goal Exceed Ratio): the share of the duration sum that may consist of bad
  trials while the load still counts as a lower bound (0: none; 0.5: the median trial decides);
- ``initial_trial_duration`` (Goal Initial Trial Duration): the shortest trials the search takes
  for the goal [s];
- ``final_trial_duration`` (Goal Final Trial Duration): trials at least this long are *full-length*
  ones, the only ones a lower bound rests on [s];
- ``duration_sum`` (Goal Duration Sum): the sum of the durations of full-length trials at a load
  needed before it can be a lower or an upper bound [s];
- ``relative_width`` (Goal Width): the search for the goal ends when the relevant lower bound is
  within this share of the relevant upper bound [1].

*Load classification* (section 5.3 of the draft, as the ``MLRsearch`` library 1.2.1 does it): at
one load, short trials only count as bad, and only by what is left of their seconds once the
good short seconds are weighed against them (``good x exceed / (1 - exceed)``). A load is an
*upper bound* when even if every missing second of the duration sum were good, more than
``exceed_ratio`` of it would be bad; a *lower bound* when even if every missing second were bad,
no more than that would. Otherwise it is undecided: more trials are needed.

The *relevant upper bound* is the lowest load classified as an upper bound; the *relevant lower
bound* the highest load classified as a lower bound below it; the *conditional throughput* is the
relevant lower bound x (1 - the loss ratio at the ``1 - exceed_ratio`` quantile of its full-length
trials, weighed by duration, missing seconds counted as full loss).

With the old goals (a bare loss ratio: exceed ratio 0, duration sum = the final trial duration)
one good full-length trial makes a lower bound and one bad trial of any length an upper bound: the
rule perfkit's ``ndrpdr`` had before goals had attributes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from perfkit.errors import ConfigError
from perfkit.search.measurer import Measurer
from perfkit.search.params import check_positive, check_rate_range, check_ratio, resolve_max_rate

#: The attributes a goal may be given as a mapping (the specification's, by MLRsearch's names).
GOAL_KEYS = ("loss_ratio", "exceed_ratio", "relative_width", "initial_trial_duration", "final_trial_duration",
             "duration_sum")
#: How much a duration may fall short of another and still count as equal (float sums).
DURATION_EPS = 1e-9


@dataclass(frozen=True)
class Goal:
    """One search goal (module doc); None attributes take the search's common parameter."""

    loss_ratio: float = 0.0
    """Goal Loss Ratio: a trial losing more than this share of its packets is bad [1]."""
    exceed_ratio: float | None = None
    """Goal Exceed Ratio: share of the duration sum that may be bad at a lower bound [1]."""
    relative_width: float | None = None
    """Goal Width: the search ends when (upper - lower) / upper <= this [1]."""
    initial_trial_duration: float | None = None
    """Goal Initial Trial Duration: the shortest trials taken for the goal [s]."""
    final_trial_duration: float | None = None
    """Goal Final Trial Duration: trials at least this long are full-length [s]."""
    duration_sum: float | None = None
    """Goal Duration Sum: full-length seconds at a load needed to classify it [s]."""

    def __post_init__(self) -> None:
        check_ratio("goals.loss_ratio", self.loss_ratio)
        if self.exceed_ratio is not None and not (
                isinstance(self.exceed_ratio, (int, float)) and 0 <= self.exceed_ratio < 1):
            raise ConfigError("goals.exceed_ratio", self.exceed_ratio, "a share of the duration sum, 0 <= x < 1")
        if self.relative_width is not None and not (
                isinstance(self.relative_width, (int, float)) and 0 < self.relative_width < 1):
            raise ConfigError("goals.relative_width", self.relative_width, "0 < x < 1")
        for name in ("initial_trial_duration", "final_trial_duration", "duration_sum"):
            check_positive(f"goals.{name}", getattr(self, name), "s", optional=True)

    def resolved(self, exceed_ratio: float, relative_width: float, initial: float, final: float,
                 duration_sum: float | None) -> Goal:
        """Every None attribute replaced by the search's common one (duration sum: the final
        trial duration), checked against each other."""
        fin = self.final_trial_duration if self.final_trial_duration is not None else final
        g = Goal(self.loss_ratio,
                 self.exceed_ratio if self.exceed_ratio is not None else exceed_ratio,
                 self.relative_width if self.relative_width is not None else relative_width,
                 self.initial_trial_duration if self.initial_trial_duration is not None else initial, fin,
                 self.duration_sum if self.duration_sum is not None
                 else max(duration_sum, fin) if duration_sum is not None else fin)
        if g.initial_trial_duration > g.final_trial_duration:
            raise ConfigError("goals.initial_trial_duration", g.initial_trial_duration,
                              f"<= the final trial duration ({g.final_trial_duration:g} s)")
        if g.duration_sum < g.final_trial_duration * (1 - DURATION_EPS):
            raise ConfigError("goals.duration_sum", g.duration_sum,
                              f">= the final trial duration ({g.final_trial_duration:g} s)")
        return g

    @property
    def legacy(self) -> bool:
        """Whether one trial classifies a load (exceed ratio 0, duration sum = final duration):
        the goals perfkit had before they had attributes."""
        return self.exceed_ratio == 0 and self.duration_sum <= self.final_trial_duration * (1 + DURATION_EPS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_goal(value: Any, where: str = "goals") -> Goal | float:
    """A goal as written: a loss ratio (kept a float: the old syntax) or a mapping of ``GOAL_KEYS``."""
    if isinstance(value, Goal):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(GOAL_KEYS))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", value[unknown[0]], f"a goal attribute: {', '.join(GOAL_KEYS)}")
        if "loss_ratio" not in value:
            raise ConfigError(f"{where}.loss_ratio", None, "a loss ratio, 0 <= x < 1 (every goal has one)")
        return Goal(**dict(value))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(where, value, "a loss ratio (0 <= x < 1) or a mapping of " + ", ".join(GOAL_KEYS))
    check_ratio(where, value)
    return float(value)


def parse_goals(values: Iterable[Any]) -> tuple[Goal | float, ...]:
    return tuple(parse_goal(v) for v in values)


def loss_ratio_of(goal: Goal | float) -> float:
    return goal.loss_ratio if isinstance(goal, Goal) else float(goal)


@dataclass
class LoadStat:
    """The trials at one load as one goal sees them (MLRsearch's ``TargetStat``) [s]."""

    goal: Goal
    good_long: float = 0.0
    """Seconds of full-length trials that satisfied the goal loss ratio [s]."""
    bad_long: float = 0.0
    """Seconds of full-length trials that did not [s]."""
    good_short: float = 0.0
    """Seconds of shorter trials that satisfied it [s]."""
    bad_short: float = 0.0
    """Seconds of shorter trials that did not [s]."""
    long_losses: dict[float, float] = dataclasses.field(default_factory=dict)
    """Loss ratio of a full-length trial -> seconds of full-length trials with it."""

    def add(self, duration: float, loss_ratio: float) -> None:
        bad = loss_ratio > self.goal.loss_ratio
        if duration >= self.goal.final_trial_duration * (1 - DURATION_EPS):
            self.long_losses[loss_ratio] = self.long_losses.get(loss_ratio, 0.0) + duration
            if bad:
                self.bad_long += duration
            else:
                self.good_long += duration
        elif bad:
            self.bad_short += duration
        else:
            self.good_short += duration

    def _excess(self) -> tuple[float, float]:
        """(effective bad seconds, the duration sum they are measured against) [s]."""
        c = self.goal.exceed_ratio
        short_excess = self.bad_short - self.good_short * c / (1.0 - c)
        excess = self.bad_long + max(0.0, short_excess)
        return excess, max(self.good_long + excess, self.goal.duration_sum)

    def estimates(self) -> tuple[bool, bool]:
        """(optimistic, pessimistic): whether the load would be a lower bound if every missing
        second of the duration sum were good, and if every one were bad."""
        excess, dursum = self._excess()
        limit = dursum * self.goal.exceed_ratio * (1 + DURATION_EPS)
        return excess <= limit, dursum - self.good_long <= limit

    @property
    def classification(self) -> str:
        """``lower`` (a lower bound), ``upper`` (an upper bound) or ``open`` (more trials needed)."""
        optimistic, pessimistic = self.estimates()
        return "lower" if pessimistic else "upper" if not optimistic else "open"

    @property
    def leans_bad(self) -> bool:
        """Whether the bad seconds so far outweigh what the exceed ratio allows of the good ones
        (any bad second at exceed ratio 0; more bad than good at 0.5): where the search goes on."""
        c = self.goal.exceed_ratio
        bad = self.bad_long + self.bad_short
        good = self.good_long + self.good_short
        return self.classification == "upper" or (self.classification == "open" and bad * (1 - c) > c * good)

    def upper_seconds_needed(self) -> float:
        """The duration [s] of the next trial to take at a load leaning bad: the initial trial
        duration while the short trials there add up to bad seconds (or there are none), else the
        final one. Short trials settle an upper bound at the same cost in seconds (the
        excess over ``exceed_ratio`` of the duration sum is what counts), and a rare loss event
        takes one of them, not a whole final trial's worth: 11 bad seconds of 21 take 11 short
        trials of 1 s in a row, or one short and one full-length of 10 s."""
        c, short, final = self.goal.exceed_ratio, self.goal.initial_trial_duration, self.goal.final_trial_duration
        if short >= final * (1 - DURATION_EPS):
            return final
        return short if self.bad_short - self.good_short * c / (1.0 - c) >= 0 else final

    @property
    def pessimistic_loss_ratio(self) -> float:
        """The loss ratio at the ``1 - exceed_ratio`` quantile of the full-length trials, by
        duration, seconds missing from the duration sum counted as full loss (MLRsearch's rule:
        on a tie the lower ratio)."""
        total = max(self.goal.duration_sum, self.good_long + self.bad_long)
        remaining = total * (1.0 - self.goal.exceed_ratio)
        ratio: float | None = None
        for loss, seconds in sorted(self.long_losses.items()):
            if ratio is None or remaining > 0.0:
                ratio = loss
                remaining -= seconds
            else:
                break
        else:
            if remaining > total * DURATION_EPS:
                ratio = 1.0
        return 1.0 if ratio is None else ratio


def goal_stat(goal: Goal, trials: Iterable[tuple[float, float]]) -> LoadStat:
    """The ``LoadStat`` of (duration [s], loss ratio) trials at one load."""
    stat = LoadStat(goal)
    for duration, loss in trials:
        stat.add(duration, loss)
    return stat


@dataclass(frozen=True)
class GoalParams:
    """The goals of a multi-goal search and the attributes they share unless a goal says otherwise
    (``ndrpdr``'s ``NdrPdr`` and ``mlrsearch``'s ``MlrSearch`` take these)."""

    goals: tuple[Goal | float, ...] = (0.0, 0.005)
    """The goals, strictest first once resolved: a loss ratio (lost / offered) [1] each, 0 for the
    NDR, or a ``Goal`` (in a campaign, a mapping of ``GOAL_KEYS``)."""
    relative_width: float = 0.005
    """Goal Width of every goal that gives none: stop when (upper - lower) / upper <= this [1]."""
    initial_duration: float = 1.0
    """Goal Initial Trial Duration of every goal that gives none: the short trials [s]."""
    final_duration: float = 10.0
    """Goal Final Trial Duration of every goal that gives none: lower bounds rest on these [s]."""
    exceed_ratio: float = 0.0
    """Goal Exceed Ratio of every goal that gives none [1]: 0, a lower bound has no bad trial."""
    duration_sum: float | None = None
    """Goal Duration Sum of every goal that gives none [s]; None = its final trial duration."""
    max_rate: float | None = None
    """Highest rate offered [pps]; None = 100 % of the scenario's line rate."""
    min_rate: float | None = None
    """Lowest rate offered [pps]; None = max_rate / 1000."""

    def __post_init__(self) -> None:
        if not self.goals:
            raise ConfigError("goals", self.goals, "at least one goal: a loss ratio, 0 <= x < 1, or a mapping of "
                              + ", ".join(GOAL_KEYS))
        object.__setattr__(self, "goals", parse_goals(self.goals))
        losses = [loss_ratio_of(g) for g in self.goals]
        if len(set(losses)) != len(losses):
            raise ConfigError("goals", losses, "distinct loss ratios")
        if not 0 < self.relative_width < 1:
            raise ConfigError("relative_width", self.relative_width, "0 < x < 1")
        check_positive("initial_duration", self.initial_duration, "s")
        check_positive("final_duration", self.final_duration, "s")
        if self.initial_duration > self.final_duration:
            raise ConfigError("initial_duration", self.initial_duration,
                              f"<= final_duration ({self.final_duration:g} s)")
        if not (isinstance(self.exceed_ratio, (int, float)) and 0 <= self.exceed_ratio < 1):
            raise ConfigError("exceed_ratio", self.exceed_ratio, "a share of the duration sum, 0 <= x < 1")
        check_positive("duration_sum", self.duration_sum, "s", optional=True)
        check_rate_range(self.min_rate, self.max_rate)
        self.search_goals()  # every goal's attributes checked against each other

    def search_goals(self) -> tuple[Goal, ...]:
        """Every goal with all its attributes, strictest (lowest loss ratio) first."""
        goals = [g if isinstance(g, Goal) else Goal(g) for g in self.goals]
        return tuple(sorted((g.resolved(self.exceed_ratio, self.relative_width, self.initial_duration,
                                        self.final_duration, self.duration_sum) for g in goals),
                            key=lambda g: g.loss_ratio))

    def resolved_rates(self, measurer: Measurer) -> dict[str, Any]:
        """The rate defaults filled in and the goals sorted, strictest first (for ``replace``)."""
        top = resolve_max_rate(self.max_rate, measurer)
        return dict(max_rate=top, goals=tuple(sorted(self.goals, key=loss_ratio_of)),
                    min_rate=self.min_rate if self.min_rate is not None else top / 1000)
