"""``mlrsearch``: FD.io CSIT's own controller, the ``MLRsearch`` library (1.2.1), measuring through
perfkit's generators, so that a figure can be compared with CSIT's on the same testbed.

The library calls ``AbstractMeasurer.measure(intended_duration, intended_load)``; ``TrialMeasurer``
answers it through perfkit's ``TrialLog``: every trial is labelled ``mlrsearch/trial``, stored and
seen by ``on_trial`` like any search's; a stalled trial is run again; a generator that offers less
than asked, or a speed-normalized one, is asked for correspondingly more -- the same host handling
perfkit's own searches get, so that the two differ only in how they search. The library counts a
trial's loss against ``max(offered, intended)`` packets, the DUT's loss as perfkit judges it
(frames the tester's own ring dropped were forwarded) plus what the generator did not send, and
files it under the load it asked for: its bounds are those loads [pps].

Goals are ``perfkit.search.goals``' (the same ``GoalParams`` as ``ndrpdr``: the same goals give the
same ``SearchGoal``); what only the library has: ``preceding_targets``, ``expansion_coefficient``,
``warmup_duration``, ``search_duration_max``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from MLRsearch import AbstractMeasurer, Config, MeasurementResult, MultipleLossRatioSearch, SearchGoal

from perfkit.errors import ConfigError, SearchError
from perfkit.search.goals import Goal, GoalParams
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.params import check_positive
from perfkit.search.result import Bounds, SearchResult, goal_name
from perfkit.search.trials import TrialLog
from perfkit.trial import TrialResult


@dataclass(frozen=True)
class MlrSearch(GoalParams):
    """Parameters of an MLRsearch run: the goals (``GoalParams``) and the library's own."""

    preceding_targets: int = 2
    """Increasingly coarser targets the library inserts before each goal's final one [1]."""
    expansion_coefficient: int = 2
    """The library's external search multiplies the width (in log space) by this [1]."""
    warmup_duration: float | None = None
    """One trial of this length at the maximum rate before the search, its result ignored [s];
    None: none (perfkit's searches have none)."""
    search_duration_max: float = 1200.0
    """The library gives up this long after the search started [s]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.preceding_targets, int) and self.preceding_targets >= 0):
            raise ConfigError("preceding_targets", self.preceding_targets, "an integer >= 0")
        if not (isinstance(self.expansion_coefficient, int) and self.expansion_coefficient >= 2):
            raise ConfigError("expansion_coefficient", self.expansion_coefficient, "an integer >= 2")
        check_positive("warmup_duration", self.warmup_duration, "s", optional=True)
        check_positive("search_duration_max", self.search_duration_max, "s")
        try:
            self.library_goals()
        except ValueError as err:
            raise ConfigError("goals", self.goals, f"goals MLRsearch accepts ({err})") from None

    def resolved(self, measurer: Measurer) -> MlrSearch:
        """A copy with the rate defaults filled in and the goals sorted, strictest first."""
        return dataclasses.replace(self, **self.resolved_rates(measurer))

    def library_goals(self) -> list[SearchGoal]:
        """The goals as the library's ``SearchGoal`` (never failing fast: a goal missed at the
        minimum rate has no lower bound, as in ``ndrpdr``)."""
        return [library_goal(g, self.preceding_targets, self.expansion_coefficient) for g in self.search_goals()]


def library_goal(g: Goal, preceding_targets: int = 2, expansion_coefficient: int = 2) -> SearchGoal:
    """``g`` (resolved) as MLRsearch's ``SearchGoal``."""
    return SearchGoal(loss_ratio=g.loss_ratio, exceed_ratio=g.exceed_ratio, relative_width=g.relative_width,
                      initial_trial_duration=g.initial_trial_duration, final_trial_duration=g.final_trial_duration,
                      duration_sum=g.duration_sum, preceding_targets=preceding_targets,
                      expansion_coefficient=expansion_coefficient, fail_fast=False)


class TrialMeasurer(AbstractMeasurer):
    """MLRsearch's measurer interface on perfkit's trial runner (module doc)."""

    def __init__(self, log: TrialLog):
        self.log = log

    def measure(self, intended_duration: float, intended_load: float) -> MeasurementResult:
        t = self.log.run(intended_load, intended_duration, "trial")
        return MeasurementResult(intended_duration=intended_duration, intended_load=intended_load,
                                 offered_count=t.tx_packets, forwarding_count=forwarded(t),
                                 intended_count=intended_count(t, intended_load, intended_duration))


def intended_count(t: TrialResult, intended_load: float, intended_duration: float) -> int:
    """The count the library judges the trial against: the load it asked for times the duration, or
    what was offered where that is more. ``TrialLog.run`` asks a generator that offered less than
    asked at earlier trials for correspondingly more; where that one offers all of it (at low rates),
    the surplus is perfkit's own compensation, not a failure of the generator, and the library's
    ``|unsent|`` would count it as loss (10 kpps then failed a 0.5 % goal by 10 % "loss")."""
    return max(t.tx_packets, round(intended_load * intended_duration), 1)


def forwarded(t: TrialResult) -> int:
    """The packets the DUT forwarded as perfkit judges it: offered minus the DUT's loss."""
    return t.tx_packets - round(t.dut_loss_ratio * t.tx_packets)


def mlrsearch(measurer: Measurer, params: MlrSearch = MlrSearch(), *, on_trial: OnTrial | None = None,
              progress: bool = False) -> SearchResult:
    """Run MLRsearch 1.2.1 through ``measurer``: one ``Bounds`` per goal with the library's relevant
    bounds and conditional throughput; ``lower_bound``/``upper_bound`` are the strictest goal's."""
    p = params.resolved(measurer)
    config = Config()
    config.goals = p.library_goals()
    config.min_load = p.min_rate
    config.max_load = p.max_rate
    config.warmup_duration = p.warmup_duration
    config.search_duration_max = p.search_duration_max
    with TrialLog(measurer, "mlrsearch", on_trial, progress) as log:
        try:
            found = MultipleLossRatioSearch(config).search(TrialMeasurer(log), debug=lambda _msg: None)
        except RuntimeError as err:
            raise SearchError(f"mlrsearch: the library gave up: {err}") from None
        bounds = []
        for goal, library in zip(p.search_goals(), config.goals):
            r = found[library]
            lower, upper, ct = r.relevant_lower_bound, r.relevant_upper_bound, r.conditional_throughput
            b = Bounds(goal_name(goal.loss_ratio), goal.loss_ratio, float(lower) if lower else None,
                       float(upper) if upper else None, goal=goal, conditional_throughput=float(ct) if ct else None)
            if lower is None and upper is not None:
                b.notes.append(f"{b.name}: loss above {goal.loss_ratio:g} even at the minimum rate "
                               f"{p.min_rate:.6g} pps")
            bounds.append(b)
        notes = sorted({n for b in bounds for n in b.notes})
        return log.result("mlrsearch", bounds[0].lower_bound, bounds[0].upper_bound, p, goals=bounds, notes=notes)
