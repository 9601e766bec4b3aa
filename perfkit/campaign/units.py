"""A campaign expanded into units (scenario x repeat x method) and how long they should take.

A *unit* is one method run on one scenario: the thing a campaign completes, skips on resume, or
restarts. Its id names it in the store (``searches/<id>.json``, the ``unit`` column of its trials),
e.g. ``<dataplane>-<variant>-64B-1flow-1core__ndr`` (``__r2`` is added for repeats when ``repeats > 1``).

The duration estimate adds, per unit, the expected trials x (duration + the backend's per-trial
overhead) and, per scenario, the generator's set-up time. Expected trial counts per method:

- ``maxrate``: its ``trials`` (on a real testbed ``RETRY_SHARE`` more); ``sweep``: its steps; ``latency``: the NDR binary search plus one per fraction;
- ``ndr``/``pdr`` (binary search): a linear phase of about half the steps to the maximum rate
  (5 with the default step of 10 %), then log2(step / width) halvings;
  ``bestworst``: two such searches with up to N trials per verdict, (N + 1) / 2 on average;
- ``ndrpdr``: the max trial, then for the strictest goal 2 + log2(ln 2 / unit) short trials (from
  a guess within a factor of 2 down to the width) and the full-length trials that make a lower
  bound, (1 - exceed ratio) x duration sum / final trial duration of them, at least 1; each
  further goal half as many short trials and as many full-length ones. A goal with an exceed ratio
  adds the short trials that make the load above an upper bound (exceed ratio x duration sum /
  initial trial duration). A real DUT (any backend but ``sim``) rarely confirms at once: per
  goal, 2 failed confirmations are added, then 3 probe + long pairs (on the veth testbed an NDR
  search at 2 % took 18 trials on average, 10 without this allowance), and ``RETRY_SHARE`` more
  trials run again after a host stall. Never more than ``max_trials``; then one latency trial per
  goal and ``latency_fractions`` entry. ``mlrsearch``: ``MLRSEARCH_FACTOR`` times as many.

These are planning figures; a run prints the estimate first and records it in its metadata.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from perfkit.campaign.model import Campaign, MethodSpec
from perfkit.errors import ConfigError
from perfkit.scenario import Scenario
from perfkit.search import METHODS

#: Trials a search on a real testbed runs again because a host stall hit them, per judged trial
#: (``perfkit.search.trials``): 0.3 on this 2-vCPU VM, whose host takes a vCPU away for 1-12 ms.
RETRY_SHARE = 0.3
#: MLRsearch's trials for the same goals, per ndrpdr trial (its preceding targets; the bench's
#: ratio, ``bench/search_vs_mlrsearch.py``).
MLRSEARCH_FACTOR = 1.2


@dataclass(frozen=True)
class Unit:
    """One method on one scenario (one repeat)."""

    id: str
    scenario: Scenario
    method: MethodSpec
    repeat: int
    """1 .. campaign.repeats."""
    shared_cores: bool = False
    """DUT and generator share a core in this unit (its figures are pessimistic)."""

    def summary(self) -> dict[str, Any]:
        """What the store keeps about the unit beside its search result."""
        from dataclasses import asdict
        return {"unit": self.id, "scenario": asdict(self.scenario), "scenario_key": self.scenario.key,
                "method": self.method.name, "label": self.method.label, "repeat": self.repeat,
                "shared_cores": self.shared_cores}


def expand(campaign: Campaign) -> list[Unit]:
    """Every unit in run order: per scenario, its repeats, and per repeat every method."""
    units = []
    for scenario in campaign.scenarios():
        shared = scenario.dut_cores in campaign.shared_cores
        for repeat in range(1, campaign.repeats + 1):
            for method in campaign.methods:
                uid = f"{scenario.key}__{method.label}" + (f"__r{repeat}" if campaign.repeats > 1 else "")
                units.append(Unit(uid, scenario, method, repeat, shared))
    _refuse_repeated(units)
    return units


def _refuse_repeated(units: list[Unit]) -> None:
    """A ConfigError naming the unit ids the expansion gives more than once (two units of one id
    would share a search summary and a journal entry, and ``compare`` would merge them)."""
    repeated = sorted(uid for uid, n in Counter(u.id for u in units).items() if n > 1)
    if repeated:
        raise ConfigError("campaign units", ", ".join(repeated),
                          "distinct unit ids (scenarios that differ in their scenario key, methods in their label)")


@dataclass(frozen=True)
class Estimate:
    """The expected duration of a set of units."""

    units: int
    scenarios: int
    """Scenarios that need a generator set-up."""
    trials: float
    """Expected trials [1]."""
    traffic_seconds: float
    """Sum of the expected trials' durations [s]."""
    overhead_seconds: float
    """Per-trial overheads [s]."""
    setup_seconds: float
    """Generator set-ups [s]."""

    simulated: bool = False
    """The generator simulates: trials report their duration but take no time."""

    @property
    def total_seconds(self) -> float:
        traffic = 0.0 if self.simulated else self.traffic_seconds
        return traffic + self.overhead_seconds + self.setup_seconds

    def describe(self) -> str:
        traffic = (f"{self.traffic_seconds:.0f} s of simulated traffic that takes no time" if self.simulated
                   else f"{self.traffic_seconds:.0f} s of traffic")
        return (f"{self.units} units on {self.scenarios} scenarios, about {self.trials:.0f} trials: "
                f"estimated {format_seconds(self.total_seconds)} ({traffic}, "
                f"{self.overhead_seconds:.0f} s of per-trial overhead, {self.setup_seconds:.0f} s of generator set-up)")

    def to_dict(self) -> dict[str, Any]:
        return {"units": self.units, "scenarios": self.scenarios, "trials": round(self.trials, 1),
                "simulated": self.simulated,
                "traffic_seconds": round(self.traffic_seconds, 1), "overhead_seconds": round(self.overhead_seconds, 1),
                "setup_seconds": round(self.setup_seconds, 1), "total_seconds": round(self.total_seconds, 1)}


def format_seconds(seconds: float) -> str:
    """``9 min 20 s``, ``45 s``, ``1 h 02 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate(campaign: Campaign, units: list[Unit] | None = None) -> Estimate:
    """Expected duration of ``units`` (default: the whole campaign)."""
    units = expand(campaign) if units is None else units
    noisy = campaign.generator.backend != "sim"
    trials = traffic = 0.0
    for u in units:
        n, secs = expected_trials(u.method, noisy)
        trials += n
        traffic += secs
    scenarios = len({u.scenario for u in units})
    g = campaign.generator
    return Estimate(len(units), scenarios, trials, traffic, trials * g.trial_overhead_seconds,
                    scenarios * g.setup_seconds, simulated=g.backend == "sim")


def expected_trials(method: MethodSpec, noisy: bool = True) -> tuple[float, float]:
    """(expected trials, expected traffic seconds) of one run of ``method`` (see module doc);
    ``noisy``: a real DUT, whose confirmations fail now and then."""
    params = {k: v for k, v in method.params.items() if not isinstance(v, str)}
    built = METHODS[method.name][0](params)
    if method.name == "maxrate":
        n = built.trials * (1 + RETRY_SHARE if noisy else 1.0)
        return n, n * built.duration
    if method.name == "sweep":
        n = len(built.fractions())
        return float(n), n * built.duration
    if method.name in ("ndr", "pdr"):
        n = _binary_trials(built, method.params)
        return n, n * built.duration
    if method.name == "bestworst":
        n = 2 * _binary_trials(built, method.params) * (built.n + 1) / 2
        return n, n * built.duration
    if method.name == "latency":
        ndr, lat = built
        n = _binary_trials(ndr, method.params)
        return n + len(lat.fractions), n * ndr.duration + len(lat.fractions) * lat.duration
    if method.name in ("ndrpdr", "mlrsearch"):
        short, final, short_s, final_s = _goal_trials(built, noisy)
        if method.name == "mlrsearch":  # the library's preceding targets: coarser rounds before the final one
            short, final, short_s, final_s = (x * MLRSEARCH_FACTOR for x in (short, final, short_s, final_s))
        n = (short + final) * (1 + RETRY_SHARE if noisy else 1)
        cap = getattr(built, "max_trials", None)
        scale = min(1.0, cap / n) if cap else 1.0
        n, seconds = n * scale, (short_s + final_s) * (n / (short + final)) * scale
        latency = len(built.goals) * len(getattr(built, "latency_fractions", ()))
        return (float(n + latency), seconds + latency * (getattr(built, "latency_duration", None) or built.final_duration))
    return 10.0, 10.0 * 2.0  # an unknown method: a guess


def _goal_trials(p: Any, noisy: bool) -> tuple[float, float, float, float]:
    """(short trials, full-length trials, their seconds [s]) an ndrpdr search of ``p``'s goals is
    expected to take (see the module doc)."""
    goals = p.search_goals()
    first = 2 + math.ceil(math.log2(math.log(2) / -math.log1p(-goals[0].relative_width)))
    short, final = 1.0, 0.0
    short_s, final_s = min(g.initial_trial_duration for g in goals), 0.0
    for i, g in enumerate(goals):
        shorts = first if i == 0 else math.ceil(first / 2)
        # full-length trials that make a lower bound; short ones that make the load above an upper bound
        finals = max(1, math.ceil((1 - g.exceed_ratio) * g.duration_sum / g.final_trial_duration - 1e-9))
        shorts += 0 if g.legacy else math.floor(g.exceed_ratio * g.duration_sum / g.initial_trial_duration)
        if noisy:  # 2 failed confirmations per goal, then 3 probe (short) + long (final) pairs
            shorts += 3
            finals += 5
        short, final = short + shorts, final + finals
        short_s, final_s = short_s + shorts * g.initial_trial_duration, final_s + finals * g.final_trial_duration
    return short, final, short_s, final_s


def _binary_trials(p: Any, raw: dict[str, Any]) -> float:
    """Linear phase plus halvings of a binary search (the step as a fraction of the maximum rate)."""
    step = 0.1
    if isinstance(raw.get("start_step"), (int, float)) and isinstance(raw.get("max_rate"), (int, float)):
        step = min(1.0, raw["start_step"] / raw["max_rate"])
    linear = max(1.0, 0.5 / step)
    halvings = max(1, math.ceil(math.log2(step / p.relative_width))) if step > p.relative_width else 0
    return linear + halvings
