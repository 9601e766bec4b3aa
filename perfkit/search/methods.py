"""Methods by name, so that a campaign can declare them as data (``method: ndrpdr`` + a dict).

``run_method("ndrpdr", gen, {"final_duration": 10})`` builds the parameter dataclass from the dict
(unknown keys are a ``ConfigError`` naming them) and runs the search.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from perfkit.errors import ConfigError
from perfkit.search.binary import BinarySearch, best_worst, binary_search
from perfkit.search.goals import GoalParams
from perfkit.search.measurer import Measurer, OnTrial
from perfkit.search.result import SearchResult
from perfkit.search.multi import NdrPdr, ndrpdr
from perfkit.search.simple import LatencyAt, MaxRate, Sweep, latency_at, max_rate, sweep


def ndr_then_latency(measurer: Measurer, params: tuple[BinarySearch, LatencyAt], *,
                     on_trial: OnTrial | None = None, progress: bool = False) -> SearchResult:
    """NDR by binary search, then latency at fractions of it (the NDR trials come first)."""
    ndr_params, lat_params = params
    found = binary_search(measurer, ndr_params, on_trial=on_trial, progress=progress)
    if found.lower_bound is None:
        return found
    return latency_at(measurer, found, lat_params, on_trial=on_trial, progress=progress)


def _binary(defaults: dict[str, Any]) -> Callable[[dict[str, Any]], BinarySearch]:
    return lambda kw: _build(BinarySearch, {**defaults, **kw})


def _latency(kw: dict[str, Any]) -> tuple[BinarySearch, LatencyAt]:
    lat_names = {"fractions", "duration"}
    lat = _build(LatencyAt, {k: v for k, v in kw.items() if k in lat_names})
    ndr = _build(BinarySearch, {k: v for k, v in kw.items() if k not in lat_names or k == "duration"})
    if ndr.loss_tolerance != 0:
        raise ConfigError("loss_tolerance", ndr.loss_tolerance, "0 (latency is measured at fractions of NDR)")
    return ndr, lat


#: name -> (build the parameters from a dict, the search function)
METHODS: dict[str, tuple[Callable[[dict[str, Any]], Any], Callable[..., SearchResult]]] = {
    "maxrate": (lambda kw: _build(MaxRate, kw), max_rate),
    "sweep": (lambda kw: _build(Sweep, kw), sweep),
    "ndr": (_binary({"loss_tolerance": 0.0}), binary_search),
    "pdr": (_binary({"loss_tolerance": 0.005}), binary_search),
    "bestworst": (_binary({"n": 5}), best_worst),
    "ndrpdr": (lambda kw: _build(NdrPdr, kw), ndrpdr),
    "mlrsearch": (lambda kw: _build(_mlr().MlrSearch, kw), lambda *a, **kw: _mlr().mlrsearch(*a, **kw)),
    "latency": (_latency, ndr_then_latency),
}


def _mlr() -> Any:
    """``perfkit.search.mlr``, imported when a campaign or command uses it (the library takes 1.3 s)."""
    from perfkit.search import mlr

    return mlr


def _build(cls: type, kw: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(kw) - names)
    if unknown:
        raise ConfigError(unknown[0], kw[unknown[0]], f"a parameter of {cls.__name__}: {', '.join(sorted(names))}")
    if issubclass(cls, GoalParams):
        kw = {**kw, **{k: tuple(kw[k]) for k in ("goals", "latency_fractions") if k in kw}}
    if cls is LatencyAt and "fractions" in kw:
        kw = {**kw, "fractions": tuple(kw["fractions"])}
    return cls(**kw)


def run_method(method: str, measurer: Measurer, params: dict[str, Any] | None = None, *,
               on_trial: OnTrial | None = None, progress: bool = False) -> SearchResult:
    """Run the method called ``method`` with parameters from ``params`` (field name -> value)."""
    if method not in METHODS:
        raise ConfigError("method", method, METHODS)
    build, search = METHODS[method]
    if method == "ndr" and (params or {}).get("loss_tolerance", 0) != 0:
        raise ConfigError("loss_tolerance", params["loss_tolerance"], "0 for ndr (use pdr)")
    return search(measurer, build(dict(params or {})), on_trial=on_trial, progress=progress)
