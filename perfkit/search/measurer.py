"""The one thing a search needs: a *measurer*, anything with ``measure(rate_pps, duration) ->
TrialResult`` (every ``Generator`` qualifies), and the ``on_trial`` callback that sees each trial
the moment it ends (``perfkit.search.trials.TrialLog`` calls both)."""
from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from perfkit.trial import TrialResult

OnTrial = Callable[[TrialResult], None]


@runtime_checkable
class Measurer(Protocol):
    """The one thing a search needs: run a trial at ``rate_pps`` [pps] for ``duration`` [s]."""

    def measure(self, rate_pps: float, duration: float) -> TrialResult: ...
