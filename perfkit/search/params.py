"""A search's parameters checked (``ConfigError`` naming the field, the value and what is allowed),
and the maximum rate filled in: the scenario's line rate when none is given."""
from __future__ import annotations

import math

from perfkit.errors import ConfigError
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search.measurer import Measurer


def check_positive(name: str, value: float | None, unit: str, optional: bool = False) -> None:
    """Raise ``ConfigError`` unless ``value`` is a finite number > 0 (or None if ``optional``)."""
    if value is None and optional:
        return
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(name, value, f"a positive number [{unit}]")


def check_count(name: str, value: int) -> None:
    """Raise ``ConfigError`` unless ``value`` is an integer >= 1 (a count of trials)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, value, "an integer >= 1")


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
