"""What limited a figure: the words (``LIMITS``) and every rule that chooses one.

A generator that could not offer the intended rate (``tx_pps`` more than ``OFFER_SHORTFALL`` below
it) is noted on the trial (``generator_limited``). Once asking for clearly more than the generator
ever offered gets no more (``shows_capacity``), that is its capacity: searches then never ask for
more (the generator, not the DUT, is the limit) and say so.

Every figure says what limited it (``LIMITS``, in ``Bounds.limited_by`` and
``SearchResult.limited_by``) and on what evidence (``reason``: what the trials just above it
lost, by the DUT's drop counter, and what no counter explains; or the generator's ceiling):

- ``generator``: the figure reached the generator's capacity (a search's bound at its ceiling, or
  nothing lost up to the top once the ceiling was shown, whatever rates the trials there landed at; or
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

Records stored before searches said what limited them get the older, coarser rules
(``stored_maxrate_limit``, ``stored_goal_limit``): they lack the evidence of the others.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from perfkit.search.judging import RATE_EPS, offered_rate
from perfkit.trial import BUSY_MIN, TrialResult, judged_pps

#: Relative shortfall of the offered rate below the intended one that counts as generator-limited.
OFFER_SHORTFALL = 0.05
#: What can limit a figure (see the module doc).
LIMITS = ("dut", "generator", "host stalls", "testbed", "max rate")
#: The limits whose figures are lower bounds of the DUT's capacity.
LOWER_BOUNDS = ("generator", "host stalls", "testbed", "max rate")
#: DUT cores busy below this share had time to spare (the cost model trusts only trials above it).
SPARE_BUSY = BUSY_MIN


# -- the generator ---------------------------------------------------------------------------------
def fell_short(offered_pps: Any, intended_pps: Any) -> Any:
    """Whether the offered rate [pps] is more than ``OFFER_SHORTFALL`` below the intended one: for
    numbers a bool, for pandas Series or numpy arrays one per element."""
    return offered_pps < intended_pps * (1 - OFFER_SHORTFALL)


def generator_limited(trial: TrialResult) -> bool:
    """True when the generator offered clearly less than the intended rate."""
    seconds = trial.elapsed if trial.elapsed > 0 else trial.duration
    return bool(fell_short(trial.tx_packets / seconds, trial.intended_pps))


def shows_capacity(trial: TrialResult, best_offer: float) -> bool:
    """Whether this short trial shows the generator's capacity: it was asked for clearly more than
    the best it ever offered (``best_offer`` [pps]) and got no more. A shortfall at a rate it has
    exceeded before (a busy moment, pacing) is no limit: once each shortfall capped the search, a
    generator short by a few % everywhere dragged it down."""
    return bool(best_offer and trial.intended_pps > best_offer * (1 + OFFER_SHORTFALL)
                and trial.tx_pps <= best_offer * (1 + OFFER_SHORTFALL))


# -- the DUT's cores -------------------------------------------------------------------------------
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



# -- loss ------------------------------------------------------------------------------------------
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



# -- a figure's limit ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Evidence:
    """What a search's bounds are judged on: the trials it judged and the generator's ceiling."""

    judged: Sequence[TrialResult]
    """The trials the search judged (not the stalled ones run again)."""
    ceiling: float | None
    """The generator's capacity [pps] once shown (``shows_capacity``); None before."""
    best_offer: float
    """The highest rate [pps] any trial was offered at."""

    def limit(self, lower: float | None, upper: float | None, loss_tolerance: float) -> str:
        """What set a bound (``LIMITS``): the generator's ceiling, nothing lost up to the maximum
        rate, or the loss just above it -- the DUT's own, or host stalls'."""
        # nothing lost up to the top once the generator showed its ceiling: the top was that ceiling
        # (it is below any rate asked for, the maximum included), whatever the trials there landed at
        if self.ceiling is not None and lower is not None and (
                upper is None or lower >= self.ceiling * (1 - OFFER_SHORTFALL)):
            return "dut" if self._shared_saturated() else "generator"
        if upper is None:
            return "max rate"
        bad = self._bad_at(upper, loss_tolerance)
        return loss_limit(bad) if bad else "dut"

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


def maxrate_limit(trial: TrialResult) -> str:
    """What limited a max-rate trial's received rate."""
    if trial.dut_loss_ratio > 0:
        return loss_limit([trial])
    if generator_limited(trial):
        return "dut" if shared_core_saturated(trial) else "generator"
    return "max rate"


def maxrate_reason(trial: TrialResult, limit: str) -> str:
    """``limit``'s evidence for a max-rate trial, in words."""
    if trial.dut_loss_ratio > 0:
        return loss_reason([trial])
    if limit == "dut":
        return (f"the generator, sharing a DUT core, offered {trial.tx_pps:.6g} of {trial.intended_pps:.6g} pps: that "
                f"core had no time to spare ({shared_core_note(trial)}); the shared set-up's capacity")
    if limit == "generator":
        return f"the generator offered {trial.tx_pps:.6g} of {trial.intended_pps:.6g} pps"
    return "nothing lost at the rate asked for"


# -- records stored before searches said -----------------------------------------------------------
def stored_maxrate_limit(lost: bool, disturbed: bool, short: bool) -> str:
    """What limited a max-rate figure stored before searches said (``SearchResult.limited_by``), from
    whether its trial lost frames, was disturbed and fell short (``fell_short``)."""
    if lost:
        return "host stalls" if disturbed else "dut"
    return "generator" if short else "max rate"


def stored_goal_limit(generator_limited: bool, lower: float | None, upper: float | None, best_offer: float) -> str:
    """The same for a search goal: at the generator's best offer [pps] when the search said it was
    generator-limited, nothing lost (no upper bound), or the DUT."""
    if generator_limited and lower is not None and lower >= best_offer * (1 - OFFER_SHORTFALL):
        return "generator"
    return "max rate" if upper is None else "dut"
