"""What every search shares: the measurer protocol, the trial log and the result.

A *measurer* is anything with ``measure(rate_pps, duration) -> TrialResult`` (every ``Generator``
qualifies). A search never calls it directly but through a ``TrialLog``, which labels each trial
``<method>/<phase>`` (e.g. ``ndr/linear``, ``ndrpdr/confirm``) in ``TrialResult.method``, keeps
it, hands it to ``on_trial`` the moment it ends and advances the progress bar.

Stalled trials are run again, whatever they lost. A trial during which a DUT core stalled at
least as long as its receive queue lasts at the trial's rate (``TrialResult.stalled``, see
``perfkit.stalls``) is kept and reported like any other, then run again, up to the measurer's
``disturbed_retries`` times (default ``DISTURBED_RETRIES``); the search judges the first trial
that did not stall, or the last one, with its loss, when every try stalled. The decision to run
again looks at the stalls alone, never at the loss: re-running only trials whose loss the stalls
explain (the rule before) kept every good trial and re-ran lossy ones until one passed, so a DUT
that loses frames of its own at a rate got up to four chances there whenever the probe reports a
stall that does not overflow the queue (the whole VM, generator included, was away; a core
without traffic stalled; the probe's half-period error), and its NDR came out high: on a
simulated DUT whose threshold varies by 3 % from trial to trial, with stalls of 1-12 ms at 8 per
second that stop the generator too, the mean NDR over 20 seeds was 1.56 % above the same searches
on a host that does not stall; judged by the stall alone, 0.30 % (``tests/test_search.py``). The
price: good trials through such stalls are run again too (16 trials a search there instead of 7).
Where most stalls cost frames (a 256-frame ring), trials whose every retry stalled are judged with
their loss under either rule, and their figures say ``host stalls``.

Speed normalization (``Generator.speed_reference_ns``, off by default): a host that shares the
vCPUs' physical cores runs them slower at times, and a CPU-bound DUT's capacity moves with that
speed, so its NDR on a VM depends on the moments its trials ran in. A speed-normalized trial
carries the reference speed and is judged at ``offered x speed_factor`` (its DUT cores' time per
step of the stall probe's speed probe / the reference's): the rate at which a DUT on CPUs of the
reference speed is loaded as this one was. With a reference for the DUT's kernel path too
(``Generator.kernel_reference_ns``; ``"auto"`` measures both on a saturated DUT), a busy trial's
program cost is scaled by the speed and its kernel path (veth, redirect: the testbed's part, whose
cost moves by itself) is taken at the reference cost (``TrialResult.speed_factor``). Every bound
is then a rate at the reference, and the result's notes say so. It suits DUTs whose cost scales
with the CPU's speed (compare ``bpf_ns_per_packet`` with ``dut_speed_ns_per_step`` across trials);
the generator's ceiling is still compared at the offered rate.

Loss is the DUT's loss (``TrialResult.dut_loss_ratio``): offered - received - what the tester's own
receive ring dropped (``tester_drops``), against the *offered* packets. Frames the tester failed to
take in are the testbed's failure, not the DUT's: they stay in the trial and its notes but never
set a bound (on a 2-core VM the sink's ring overflows whenever its core stalls). When the generator could
not offer the intended rate (``tx_pps`` more than ``OFFER_SHORTFALL`` below it) the trial is noted;
every trial is judged at the rate really offered (never above the intended one). Once asking for
clearly more than the generator ever offered gets no more, that is its capacity: searches then
never ask for more (the generator, not the DUT, is the limit) and say so (``generator_limited``).

Every figure says what limited it (``LIMITS``, in ``Bounds.limited_by`` and
``SearchResult.limited_by``) and on what evidence (``reason``: what the trials just above it
lost, by the DUT's drop counter, and what no counter explains; or the generator's ceiling):

- ``generator``: the figure reached the generator's capacity (a search's bound at its ceiling, or
  a max-rate trial that lost nothing while the generator offered less than asked): the DUT can do
  at least this much -- a lower bound, never a DUT figure. Not so where the generator shares a DUT
  core (``shared_cores``, two DUT cores on a 2-vCPU machine) and that core had no time to spare,
  mostly the DUT's packet threads' (``shared_core_saturated``): the real-time packet threads take
  the core before the generator's thread, which gets what they leave, so the generator falling
  short there is where the shared set-up runs out -- ``dut``, the DUT's capacity in that set-up
  (pessimistic, and noted);
- ``dut``: the DUT lost frames just above it, with no host stall to explain the loss;
- ``host stalls``: the loss that set it was explained by measured host stalls (disturbed trials
  whose retries ran out);
- ``testbed``: the DUT's loss just above it were overflows of its receive ring (give or take
  ``trial.IN_FLIGHT`` frames, whatever the queue's size) while the core whose ring overflowed had
  time to spare (``ring_core_busy`` below ``SPARE_BUSY``): frames arrived in bursts faster than a
  veth port's 256-frame ring could hold, or during stalls too short for the probe -- the testbed's
  buffering, not the DUT's capacity (``--rx-queue`` gives the DUT a NIC's ring). The core is judged
  on its own (``TrialResult.ring_cores``): with two DUT cores, one saturated and one idle, the mean
  is 0.5 and says nothing. Where the overflowing queue cannot be told (the cpumap's, one per core),
  the busiest DUT core is taken: a DUT's own loss must never pass for the testbed's, and a busy
  core anywhere may be what dropped. A core counts as busy with whatever ran on it, the tester's
  threads on a core it shares with the DUT (``shared_cores``) included: such a core had no time
  to spare, and its loss is the DUT's in that set-up (pessimistic, and noted);
- ``max rate``: nothing was lost up to the highest rate asked for (the line rate by default).

Only a ``dut`` figure is the DUT's capacity; every other one is a lower bound of it
(``LOWER_BOUNDS``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from tqdm import tqdm

from perfkit import stop
from perfkit.errors import ConfigError
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.trial import BUSY_MIN, TrialResult, judged_pps

#: Relative shortfall of the offered rate below the intended one that counts as generator-limited.
OFFER_SHORTFALL = 0.05
#: Relative tolerance used when comparing rates computed along different paths.
RATE_EPS = 1e-9
#: What can limit a figure (see the module doc).
LIMITS = ("dut", "generator", "host stalls", "testbed", "max rate")
#: The limits whose figures are lower bounds of the DUT's capacity.
LOWER_BOUNDS = ("generator", "host stalls", "testbed", "max rate")
#: DUT cores busy below this share had time to spare (the cost model trusts only trials above it).
SPARE_BUSY = BUSY_MIN
#: Retries of a disturbed trial when the measurer does not say (``Generator.disturbed_retries``).
DISTURBED_RETRIES = 3
#: Bounds of the speed factor a search corrects its next ask by (a probe reading outside them is
#: not trusted to predict the next trial).
SPEED_FACTOR_MAX = 1.5
#: Speed-normalized trials whose median speed factor predicts the next one's.
SPEED_PREDICT = 5

OnTrial = Callable[[TrialResult], None]


@runtime_checkable
class Measurer(Protocol):
    """The one thing a search needs: run a trial at ``rate_pps`` [pps] for ``duration`` [s]."""

    def measure(self, rate_pps: float, duration: float) -> TrialResult: ...


# -- validation helpers ------------------------------------------------------------------------
def check_positive(name: str, value: float | None, unit: str, optional: bool = False) -> None:
    """Raise ``ConfigError`` unless ``value`` is a finite number > 0 (or None if ``optional``)."""
    if value is None and optional:
        return
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(name, value, f"a positive number [{unit}]")


def check_ratio(name: str, value: float) -> None:
    """Raise ``ConfigError`` unless ``0 <= value < 1`` (a loss ratio)."""
    if not (isinstance(value, (int, float)) and 0 <= value < 1):
        raise ConfigError(name, value, "a loss ratio, 0 <= x < 1 (0.005 = 0.5 %)")


def check_rate_range(min_rate: float | None, max_rate: float | None) -> None:
    """Both optional rates positive, and ``min_rate < max_rate`` when both are given."""
    check_positive("max_rate", max_rate, "pps", optional=True)
    check_positive("min_rate", min_rate, "pps", optional=True)
    if min_rate is not None and max_rate is not None and min_rate >= max_rate:
        raise ConfigError("min_rate", min_rate, f"less than max_rate ({max_rate:g} pps)")


def line_rate_pps(scenario: Scenario) -> float:
    """100 % of the scenario's line rate [pps] for the frames the generator puts on the wire."""

    return Rate(100, "%", scenario.line_rate).pps(scenario.wire_frame_size)


def resolve_max_rate(max_rate: float | None, measurer: Measurer) -> float:
    """``max_rate`` if given, else the line rate of the measurer's ``scenario``."""
    if max_rate is not None:
        return max_rate
    scenario = getattr(measurer, "scenario", None)
    if not isinstance(scenario, Scenario):
        raise ConfigError("max_rate", None, "a rate [pps] when the measurer has no scenario")
    return line_rate_pps(scenario)


# -- judging a trial ---------------------------------------------------------------------------
def offered_rate(trial: TrialResult) -> float:
    """The rate [pps] a trial is judged at (``TrialResult.judged_pps``): at the reference CPU speed
    when the trial is speed-normalized."""
    return trial.judged_pps


def generator_limited(trial: TrialResult) -> bool:
    """True when the generator offered clearly less than the intended rate."""
    seconds = trial.elapsed if trial.elapsed > 0 else trial.duration
    return trial.tx_packets / seconds < trial.intended_pps * (1 - OFFER_SHORTFALL)


def is_good(trial: TrialResult, loss_tolerance: float) -> bool:
    """Whether the trial's DUT loss ratio (against offered packets) is within ``loss_tolerance``."""
    return trial.dut_loss_ratio <= loss_tolerance


def narrow(lower: float, upper: float, relative_width: float, resolution: float | None = None) -> bool:
    """Whether ``[lower, upper]`` is within ``resolution`` [pps], or else ``relative_width`` of upper."""
    if resolution is not None:
        return upper - lower <= resolution * (1 + RATE_EPS)
    return upper - lower <= relative_width * upper * (1 + RATE_EPS)


# -- results -----------------------------------------------------------------------------------
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

    @property
    def relative_width(self) -> float | None:
        """(upper - lower) / upper, or None if a bound is missing."""
        if self.lower_bound is None or self.upper_bound is None:
            return None
        return (self.upper_bound - self.lower_bound) / self.upper_bound

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["relative_width"] = self.relative_width
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


# -- running trials ----------------------------------------------------------------------------
class TrialLog:
    """Runs, labels, keeps and reports the trials of one search (a context manager)."""

    def __init__(self, measurer: Measurer, method: str, on_trial: OnTrial | None = None,
                 progress: bool = False, total: int | None = None):
        if not callable(getattr(measurer, "measure", None)):
            raise ConfigError("measurer", type(measurer).__name__, "an object with measure(rate_pps, duration)")
        self.measurer = measurer
        self.method = method
        self.on_trial = on_trial
        self.trials: list[TrialResult] = []
        self.notes: list[str] = []
        self.ceiling: float | None = None
        """The generator's capacity [pps], once shown (see ``_note_shortfall``); None before."""
        self.best_offer = 0.0
        """The highest rate [pps] any trial was judged at so far."""
        self.shortfalls = 0
        """Trials the generator could not offer at their intended rate."""
        self.offer_ratio = 1.0
        """Offered / intended rate of the last trial below capacity (0.5 .. 1)."""
        self.judged: list[TrialResult] = []
        """The trials the search judged (``run``'s): not the stalled ones run again."""
        self.speed_factors: list[tuple[float, float]] = []
        """(duration [s], ``speed_factor``) of the speed-normalized trials so far: the next trial is
        asked for correspondingly less (``predicted_speed_factor``), so that it is judged near the
        rate the search wants."""
        self._start = time.monotonic()
        self._bar = tqdm(total=total, desc=method, unit="trial", disable=not progress, leave=False)

    def __enter__(self) -> TrialLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()

    @property
    def wall_seconds(self) -> float:
        return time.monotonic() - self._start

    def run(self, rate_pps: float, duration: float, phase: str) -> TrialResult:
        """One trial at ``rate_pps`` [pps] for ``duration`` [s], labelled ``<method>/<phase>``.

        A generator that offers a steady fraction less than asked (pacing on a busy machine) is
        asked for correspondingly more, below its capacity, so that trials land where the search
        wants them; they are judged at what was really offered either way.
        """
        ask = rate_pps / self.offer_ratio / self.predicted_speed_factor(duration)
        if self.ceiling is not None:
            ask = min(ask, max(rate_pps, self.ceiling))
        retries = getattr(self.measurer, "disturbed_retries", DISTURBED_RETRIES)
        trial = self._measure(ask, duration, phase)
        for attempt in range(1, retries + 1):
            if not trial.stalled:
                break
            # whatever it lost: the stall, not the loss, decides (see the module doc)
            trial.notes.append(f"stalled, {'disturbed, ' if trial.disturbed else ''}run again "
                               f"({attempt} of {retries}): the search judges the next trial")
            self._keep(trial, phase, rate_pps)
            trial = self._measure(ask, duration, phase)
        if trial.stalled and retries:
            trial.notes.append(f"still stalled after {retries} retries: judged with its loss")
        self._keep(trial, phase, rate_pps)
        self.judged.append(trial)
        return trial

    def _measure(self, ask: float, duration: float, phase: str) -> TrialResult:
        trial = self.measurer.measure(ask, duration)
        stop.check()   # a stop pending (perfkit.stop): the trial is not kept, the search ends here
        trial.method = f"{self.method}/{phase}"
        if generator_limited(trial):
            self.shortfalls += 1
            self._note_shortfall(trial)
        offered = judged_pps(trial.tx_pps, trial.intended_pps)  # the generator's, not speed-normalized
        self.best_offer = max(self.best_offer, offered)
        if trial.intended_pps > 0 and (self.ceiling is None or offered < self.ceiling * (1 - OFFER_SHORTFALL)):
            self.offer_ratio = min(1.0, max(0.5, offered / trial.intended_pps))
        if trial.speed_reference_ns:
            self.speed_factors.append((duration, min(SPEED_FACTOR_MAX, max(1 / SPEED_FACTOR_MAX, trial.speed_factor))))
        return trial

    def predicted_speed_factor(self, duration: float) -> float:
        """What the next trial's ``speed_factor`` will probably be: the median of the last
        ``SPEED_PREDICT`` trials of the same ``duration`` [s], or of any duration before there is
        one (1 without speed normalization). Durations apart: a VM's speed varies less over 10 s
        than over 1 s (here 2.2 % against 8 %), and 1 s trials ran at another mean factor than
        10 s ones (about 1.0-1.05 against 1.11 in one search here)."""
        same = [f for d, f in self.speed_factors if abs(d - duration) <= duration * RATE_EPS]
        recent = sorted((same or [f for _, f in self.speed_factors])[-SPEED_PREDICT:])
        return recent[len(recent) // 2] if recent else 1.0

    def _keep(self, trial: TrialResult, phase: str, rate_pps: float) -> None:
        """Log the trial and hand it to ``on_trial`` (which stores it) before anything else."""
        self.trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(trial)
        self._bar.update(1)
        self._bar.set_postfix_str(f"{phase} {rate_pps / 1e6:.4g} Mpps loss {trial.dut_loss_ratio:.3g}"
                                  + (" disturbed" if trial.disturbed else ""))

    def speed_note(self) -> list[str]:
        """What speed normalization did to the trials' rates (nothing when it was off)."""
        normalized = [t for t in self.trials if t.speed_reference_ns and t.dut_speed_ns_per_step]
        if not normalized:
            return []
        factors = [t.speed_factor for t in normalized]
        kernel = normalized[-1].kernel_reference_ns
        return [f"speed-normalized: rates are at the reference CPU speed of {normalized[-1].speed_reference_ns:.4g} ns "
                f"per probe step" + (f" and the reference kernel path cost of {kernel:.4g} ns per packet" if kernel else "")
                + "; each trial is judged at its offered rate x its speed factor (``TrialResult.speed_factor``: "
                f"{min(factors):.3f} .. {max(factors):.3f} in this search)"]

    def _note_shortfall(self, trial: TrialResult) -> None:
        note = (f"generator offered {trial.tx_pps:.6g} pps of the intended {trial.intended_pps:.6g} pps; "
                "judged at the offered rate")
        trial.notes.append(note)
        # A capacity limit shows as asking clearly more than it ever offered and getting no more.
        # A shortfall at a rate it has exceeded before (a busy moment, pacing) is no limit: once each
        # shortfall capped the search, a generator short by a few % everywhere dragged it down.
        if (self.best_offer and trial.intended_pps > self.best_offer * (1 + OFFER_SHORTFALL)
                and trial.tx_pps <= self.best_offer * (1 + OFFER_SHORTFALL)):
            self.ceiling = max(self.ceiling or 0.0, self.best_offer, trial.tx_pps)

    def result(self, method: str, lower: float | None, upper: float | None, params: Any,
               goals: list[Bounds] | None = None, notes: list[str] | None = None) -> SearchResult:
        """Assemble the ``SearchResult`` from the trials logged so far."""
        limited = ([f"generator-limited: it offered at most {self.ceiling:.6g} pps when asked for more; "
                    "rates above that were not tested"] if self.ceiling is not None else
                   [f"the generator fell short of the intended rate in {self.shortfalls} trial(s); "
                    "they were judged at the rate really offered"] if self.shortfalls else [])
        goals = goals or []
        for g in goals:
            g.limited_by = self.limit(g.lower_bound, g.upper_bound, g.loss_tolerance)
            g.reason = self.reason(g.limited_by, g.upper_bound, g.loss_tolerance)
        if goals:
            limit, reason = goals[0].limited_by, goals[0].reason
        elif method == "maxrate" and self.trials:
            limit = self.maxrate_limit(self.trials[-1])
            last = self.trials[-1]
            reason = (loss_reason([last]) if last.dut_loss_ratio > 0 else
                      f"the generator, sharing a DUT core, offered {last.tx_pps:.6g} of {last.intended_pps:.6g} pps: that "
                      f"core had no time to spare ({shared_core_note(last)}); the shared set-up's capacity"
                      if limit == "dut" else
                      f"the generator offered {last.tx_pps:.6g} of {last.intended_pps:.6g} pps" if limit == "generator"
                      else "nothing lost at the rate asked for")
        else:
            limit = self.limit(lower, upper, 0.0)
            reason = self.reason(limit, upper, 0.0)
        return SearchResult(
            method=method, lower_bound=lower, upper_bound=upper, trials=list(self.trials),
            goals=goals, params=dataclasses.asdict(params),
            notes=self.notes + limited + self.speed_note() + (notes or []),
            generator_limited=limit == "generator" or any(g.limited_by == "generator" for g in goals),
            wall_seconds=self.wall_seconds, limited_by=limit, reason=reason)

    def limit(self, lower: float | None, upper: float | None, loss_tolerance: float) -> str:
        """What set a bound (``LIMITS``): the generator's ceiling, nothing lost up to the maximum
        rate, or the loss just above it -- the DUT's own, or host stalls'."""
        if self.ceiling is not None and lower is not None and lower >= self.ceiling * (1 - OFFER_SHORTFALL):
            return "dut" if self._shared_saturated() else "generator"
        if upper is None:
            return "max rate"
        bad = self._bad_at(upper, loss_tolerance)
        return loss_limit(bad) if bad else "dut"

    def _bad_at(self, upper: float, loss_tolerance: float) -> list[TrialResult]:
        """The judged trials at ``upper`` [pps] that lost more than ``loss_tolerance``."""
        return [t for t in self.judged if abs(offered_rate(t) - upper) <= upper * RATE_EPS * 10
                and t.dut_loss_ratio > loss_tolerance]

    def _at_ceiling(self) -> list[TrialResult]:
        """The judged trials offered within ``OFFER_SHORTFALL`` of the generator's ceiling."""
        if self.ceiling is None:
            return []
        return [t for t in self.judged if judged_pps(t.tx_pps, t.intended_pps) >= self.ceiling * (1 - OFFER_SHORTFALL)]

    def _shared_saturated(self) -> bool:
        """Whether the generator's ceiling is where a DUT core it shares ran out (the module doc)."""
        near = self._at_ceiling()
        return bool(near) and all(shared_core_saturated(t) for t in near)

    def reason(self, limit: str, upper: float | None, loss_tolerance: float) -> str:
        """``limit``'s evidence, in words (``Bounds.reason``)."""
        if self.ceiling is not None and limit == "dut" and self._shared_saturated() and (
                upper is None or not self._bad_at(upper, loss_tolerance)):
            return (f"the generator, sharing a DUT core, offered at most {self.ceiling:.6g} pps: that core had no "
                    f"time to spare ({shared_core_note(self._at_ceiling()[-1])}); the shared set-up's capacity")
        if limit == "generator":
            return f"the generator offered at most {self.ceiling or self.best_offer:.6g} pps"
        if limit == "max rate" or upper is None:
            return "nothing lost up to the highest rate asked for"
        bad = self._bad_at(upper, loss_tolerance)
        return loss_reason(bad) if bad else ""

    @staticmethod
    def maxrate_limit(trial: TrialResult) -> str:
        """What limited a max-rate trial's received rate."""
        if trial.dut_loss_ratio > 0:
            return loss_limit([trial])
        if generator_limited(trial):
            return "dut" if shared_core_saturated(trial) else "generator"
        return "max rate"


def _core_busy(trial: TrialResult, core: str) -> float:
    """How busy DUT core ``core`` was [0..1]: the larger of its packet threads' share and the share
    anything ran on it (1 - idle of ``dut_core_time``)."""
    share = trial.dut_core_time.get(core)
    return max(trial.dut_busy_per_core.get(core, 0.0), 1 - share.get("idle", 1.0) if share else 0.0)


def shared_core_saturated(trial: TrialResult) -> bool:
    """Whether the trial's DUT shares a core with the tester (``shared_cores``) and a DUT core had no
    time to spare (busy at least ``SPARE_BUSY``), its packet threads having run there more than
    anything but the tester (``dut_core_time``'s ``other``): what the shared core gives the
    generator is then what the DUT leaves it."""
    return trial.shared_cores and bool(_saturated_cores(trial))


def _saturated_cores(trial: TrialResult) -> list[str]:
    """The DUT cores busy at least ``SPARE_BUSY`` whose packet threads ran more than others there."""
    return [core for core, busy in trial.dut_busy_per_core.items()
            if _core_busy(trial, core) >= SPARE_BUSY and busy >= trial.dut_core_time.get(core, {}).get("other", 0.0)]


def shared_core_note(trial: TrialResult) -> str:
    """The DUT core that ran out, in words: ``"core 0 busy 0.95, the DUT's packet threads 0.77"``."""
    core = max(_saturated_cores(trial) or trial.dut_busy_per_core, key=lambda c: _core_busy(trial, c), default=None)
    if core is None:
        return "no per-core figures"
    return f"core {core} busy {_core_busy(trial, core):.2f}, the DUT's packet threads {trial.dut_busy_per_core[core]:.2f}"


def ring_core_busy(trial: TrialResult) -> float | None:
    """How busy [0..1] the busiest DUT core whose receive queue overflowed was (``ring_cores``; every
    DUT core when none is named): the larger of its packet threads' share (``dut_busy_per_core``)
    and the share anything ran on it (``dut_core_time``: 1 - idle). Trials stored before cores were
    judged one by one have only the mean, ``dut_busy``; None when nothing was measured."""
    per_core = trial.dut_busy_per_core
    cores = [str(c) for c in trial.ring_cores] or list(per_core) or list(trial.dut_core_time)
    busy = [_core_busy(trial, c) for c in cores if c in per_core or c in trial.dut_core_time]
    return max(busy) if busy else trial.dut_busy


def ring_overflow_with_time_to_spare(trial: TrialResult) -> bool:
    """Whether all the DUT lost were receive-ring overflows (give or take ``trial.IN_FLIGHT``
    frames) while the core whose ring overflowed was busy less than ``SPARE_BUSY`` (the ``testbed``
    limit)."""
    busy = ring_core_busy(trial)
    return trial.ring_overflow_only() and busy is not None and busy < SPARE_BUSY


def loss_limit(lossy: list[TrialResult]) -> str:
    """What the DUT's loss in these trials (those that set a bound) says limited it: ``host stalls``
    if stalls explained all of it, ``testbed`` if all of it overflowed a ring with time to spare,
    else ``dut``."""
    if all(t.disturbed for t in lossy):
        return "host stalls"
    if all(t.disturbed or ring_overflow_with_time_to_spare(t) for t in lossy):
        return "testbed"
    return "dut"


def loss_reason(lossy: list[TrialResult]) -> str:
    """What the DUT lost in these trials, by its drop counter, and what no counter explains:
    ``"1 trial(s) at 132429 pps lost 405 frames: rx_ring_full 405"``."""
    drops: dict[str, int] = {}
    lost = 0
    for t in lossy:
        lost += t.lost_packets - sum(t.tester_drops.values())
        for k, v in t.dut_drops.items():
            drops[k] = drops.get(k, 0) + v
    parts = [f"{k} {v}" for k, v in sorted(drops.items())]
    if lost > sum(drops.values()):
        parts.append(f"{lost - sum(drops.values())} that no counter explains")
    rates = sorted({round(offered_rate(t)) for t in lossy})
    return (f"{len(lossy)} trial(s) at {', '.join(f'{r}' for r in rates)} pps lost {lost} frames: "
            + ", ".join(parts) + (f"; {sum(t.disturbed for t in lossy)} explained by host stalls"
                                  if any(t.disturbed for t in lossy) else ""))


def goal_name(loss_tolerance: float) -> str:
    """``ndr`` for 0, else ``pdr<percent>%`` (e.g. ``pdr0.5%``)."""
    return "ndr" if loss_tolerance == 0 else f"pdr{loss_tolerance * 100:g}%"
