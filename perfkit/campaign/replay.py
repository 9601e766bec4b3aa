"""Replaying a unit's recorded trials: how a resumed search walks its recorded path, then goes on live.

A unit that was interrupted restarts its search from the beginning, but its trials already on disk
are *replayed*: as long as the search asks for the same (rate, duration) as the recorded trial at
that position, it gets the recorded result instead of new traffic. Searches are deterministic
given their results, so the restarted search walks the recorded path and goes on live exactly
where the interruption was: no trial is measured twice, none is lost. Should the search ask for
something else (its code or generator changed), the rest of the recorded trials are *superseded*
(kept on disk, not part of the unit's result) and the search continues live.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from perfkit.campaign.backend import LazyGenerator
from perfkit.generators.base import Generator
from perfkit.perf.store import write_folded
from perfkit.store import RunStore
from perfkit.trial import TrialResult

#: Relative tolerance when matching a requested (rate, duration) with a recorded trial.
REPLAY_TOLERANCE = 1e-9


class ReplayMeasurer:
    """Serves a unit's recorded trials while the search asks for them, then measures live."""

    def __init__(self, live: LazyGenerator, recorded: list[TrialResult],
                 on_diverge: Callable[[list[TrialResult]], None], perf_dir: Path | None = None):
        self.live = live
        self.scenario = live.scenario
        #: Where ``perf record``'s folded stacks of live trials go (None: no perf).
        self.perf_dir = perf_dir
        #: Retries of disturbed trials (``Generator.disturbed_retries``), as the generator option says.
        self.disturbed_retries = live.options.get("disturbed_retries", Generator.disturbed_retries)
        self.pending = list(recorded)
        self.on_diverge = on_diverge
        self.replayed: set[str] = set()

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        if self.pending:
            rec = self.pending[0]
            if packets is None and _close(rec.intended_pps, rate_pps) and _close(rec.duration, duration):
                self.pending.pop(0)
                self.replayed.add(rec.trial_id)
                # the search's TrialLog adds its shortfall note again
                rec.notes = [n for n in rec.notes if not n.startswith("generator offered ")]
                return rec
            self.finish()
        if self.perf_dir is None:
            return self.live.measure(rate_pps, duration, packets)
        with self.live._live().perf_recorder() as rec:
            trial = self.live.measure(rate_pps, duration, packets)
        assert rec.profile is not None
        write_folded(self.perf_dir, trial.trial_id, rec.profile.folded)
        return trial

    def finish(self) -> None:
        """Give up the recorded trials not asked for (they are superseded)."""
        if self.pending:
            rest, self.pending = self.pending, []
            self.on_diverge(rest)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REPLAY_TOLERANCE * max(abs(a), abs(b), 1e-12)


def recorded_trials(store: RunStore, superseded: set[str]) -> dict[str, list[TrialResult]]:
    """unit id -> its trials on disk (not superseded), in the order they were written."""
    frame = store.trials()
    if frame.empty or "unit" not in frame:
        return {}
    out: dict[str, list[TrialResult]] = {}
    for rec in frame.to_dict("records"):
        unit = rec.get("unit")
        if isinstance(unit, str) and rec["trial_id"] not in superseded:
            out.setdefault(unit, []).append(TrialResult.from_record(rec))
    return out
