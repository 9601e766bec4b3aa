"""Running a search's trials: ``TrialLog`` asks the measurer for each trial, labels it, keeps it
and assembles the ``SearchResult``.

A search never calls its measurer (``perfkit.search.measurer``) directly but through a
``TrialLog``, which labels each trial ``<method>/<phase>`` (e.g. ``ndr/linear``,
``ndrpdr/confirm``) in ``TrialResult.method``, keeps it, hands it to ``on_trial`` the moment it
ends and advances the progress bar. It asks a generator that falls short of the intended rate for
correspondingly more (below its capacity, ``perfkit.search.limits``) and a speed-normalized one
(``perfkit.search.judging``) for what its next trial will probably be judged at.

Stalled trials are run again, whatever they lost. A trial during which a DUT core stalled at
least as long as its receive queue lasts at the trial's rate (``TrialResult.stalled``, see
``perfkit.host.disturbance``) is kept and reported like any other, then run again, up to the measurer's
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
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from tqdm import tqdm

from perfkit import stop
from perfkit.errors import ConfigError
from perfkit.search.judging import RATE_EPS
from perfkit.search.limits import (OFFER_SHORTFALL, Evidence, generator_limited, maxrate_limit, maxrate_reason,
                                   shows_capacity)
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.result import Bounds, SearchResult
from perfkit.trial import TrialResult, judged_pps

#: Retries of a disturbed trial when the measurer does not say (``Generator.disturbed_retries``).
DISTURBED_RETRIES = 3
#: Bounds of the speed factor a search corrects its next ask by (a probe reading outside them is
#: not trusted to predict the next trial).
SPEED_FACTOR_MAX = 1.5
#: Speed-normalized trials whose median speed factor predicts the next one's.
SPEED_PREDICT = 5


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
        if shows_capacity(trial, self.best_offer):
            self.ceiling = max(self.ceiling or 0.0, self.best_offer, trial.tx_pps)

    def result(self, method: str, lower: float | None, upper: float | None, params: Any,
               goals: list[Bounds] | None = None, notes: list[str] | None = None) -> SearchResult:
        """Assemble the ``SearchResult`` from the trials logged so far."""
        limited = ([f"generator-limited: it offered at most {self.ceiling:.6g} pps when asked for more; "
                    "rates above that were not tested"] if self.ceiling is not None else
                   [f"the generator fell short of the intended rate in {self.shortfalls} trial(s); "
                    "they were judged at the rate really offered"] if self.shortfalls else [])
        goals = goals or []
        evidence = self.evidence()
        for g in goals:
            g.limited_by = evidence.limit(g.lower_bound, g.upper_bound, g.loss_tolerance)
            g.reason = evidence.reason(g.limited_by, g.upper_bound, g.loss_tolerance)
        if goals:
            limit, reason = goals[0].limited_by, goals[0].reason
        elif method == "maxrate" and self.trials:
            # with repeats, the judged trial whose received rate is the figure (the median's)
            at = min(self.judged, key=lambda t: abs(t.rx_pps - lower)) if self.judged and lower is not None \
                else self.trials[-1]
            limit = maxrate_limit(at)
            reason = maxrate_reason(at, limit)
        else:
            limit = evidence.limit(lower, upper, 0.0)
            reason = evidence.reason(limit, upper, 0.0)
        return SearchResult(
            method=method, lower_bound=lower, upper_bound=upper, trials=list(self.trials),
            goals=goals, params=dataclasses.asdict(params),
            notes=self.notes + limited + self.speed_note() + (notes or []),
            generator_limited=limit == "generator" or any(g.limited_by == "generator" for g in goals),
            wall_seconds=self.wall_seconds, limited_by=limit, reason=reason)


    def evidence(self) -> Evidence:
        """What this search's bounds are judged on so far (``perfkit.search.limits``)."""
        return Evidence(list(self.judged), self.ceiling, self.best_offer)
