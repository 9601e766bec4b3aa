"""Benchmark methodologies over one measurer interface (``measure(rate_pps, duration)``).

The same searches run on the local generator, TRex or a simulated DUT:

- ``max_rate(MaxRate)``: offer the maximum rate, report what comes through;
- ``sweep(Sweep)``: frame-loss-rate sweep, start..stop of a nominal rate in steps;
- ``binary_search(BinarySearch)``: vNet-SLA NDR/PDR binary search, single run (linear phase, then
  halving the step to a resolution); ``best_worst`` runs it as best-of-N and worst-of-N;
- ``ndrpdr(NdrPdr)``: NDR and several PDRs in one search, short trials then full-duration
  confirmations (perfkit's design after MLRsearch's idea), goals with the attributes of
  draft-ietf-bmwg-mlrsearch (``goals``: ``Goal``, loss ratio, exceed ratio, trial durations,
  duration sum, width) and their conditional throughput;
- ``mlrsearch(MlrSearch)``: the same goals searched by FD.io CSIT's ``MLRsearch`` library itself,
  measuring through the same generators;
- ``latency_at(LatencyAt)``: latency at fractions of a throughput found (``ndr_then_latency``
  does both).

``run_method(name, measurer, {field: value})`` runs any of them by name (for declarative campaigns).

Each returns a ``SearchResult`` (``lower_bound``/``upper_bound`` [pps], ``trial_count``,
``trial_seconds``, every trial labelled ``<method>/<phase>``); ``on_trial`` sees each trial as
soon as it ends.

What the methods share, one module each: ``measurer`` (the protocol), ``params`` (checks and the
line rate), ``judging`` (the rate and loss a trial is judged by), ``limits`` (what limited a figure:
the words and every rule that picks one), ``trials`` (``TrialLog``: running, retrying and keeping
trials), ``goals`` (the specification's search goals and load classification) and ``result``
(``SearchResult``, ``Bounds``).
"""
from perfkit.search.binary import RULES, BinarySearch, best_worst, binary_search
from perfkit.search.goals import Goal, GoalParams
from perfkit.search.judging import is_good, offered_rate
from perfkit.search.limits import OFFER_SHORTFALL, generator_limited
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.methods import METHODS, ndr_then_latency, run_method
from perfkit.search.multi import NdrPdr, ndrpdr
from perfkit.search.params import line_rate_pps
from perfkit.search.result import Bounds, SearchResult
from perfkit.search.simple import LatencyAt, MaxRate, Sweep, latency_at, max_rate, sweep
from perfkit.search.trials import TrialLog

__all__ = [
    "METHODS", "OFFER_SHORTFALL", "RULES", "BinarySearch", "Bounds", "Goal", "GoalParams", "LatencyAt", "MaxRate",
    "Measurer", "MlrSearch", "NdrPdr",
    "OnTrial", "SearchResult", "Sweep", "TrialLog", "best_worst", "binary_search", "generator_limited",
    "is_good", "latency_at", "line_rate_pps", "max_rate", "mlrsearch", "ndr_then_latency", "ndrpdr", "offered_rate",
    "run_method", "sweep",
]


def __getattr__(name: str) -> object:
    """``MlrSearch`` and ``mlrsearch``, imported when first used: the MLRsearch library takes 1.3 s
    to import, which every ``perfkit`` command would pay."""
    if name in ("MlrSearch", "mlrsearch"):
        from perfkit.search import mlr

        return getattr(mlr, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
