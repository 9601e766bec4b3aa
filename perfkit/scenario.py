"""``Scenario``: what stays fixed while a search varies the rate -- the dataplane, its traffic and
the DUT set-up.

Generic fields (frame size, flows, DUT cores, line rate) are checked here; ``params`` are the
dataplane's own scenario parameters (PGW-U: direction, sessions ...), validated by the dataplane
(``perfkit.dataplane.Dataplane.validate``), so an error always names the field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from perfkit import dataplanes, knobs
from perfkit.dataplane import Dataplane, Traffic
from perfkit.errors import ConfigError
from perfkit.units import FRAME_MAX, FRAME_MIN, LINE_RATES


@dataclass(frozen=True)
class Scenario:
    """What stays fixed while a search varies the rate: the traffic and the DUT set-up."""

    dataplane: str = dataplanes.DEFAULT
    """The dataplane under test (a package of ``perfkit.dataplanes``)."""
    frame_size: int = 64
    """Frame size [bytes], FCS included (the dataplane says which frame: ``frame_size_doc``)."""
    flows: int = 1
    """Distinct flows; 1 is the single-flow (single-core) case."""
    dut_cores: int = 1
    """CPU cores given to the DUT's receive processing."""
    line_rate: str = "10GbE"
    """The nominal line rate percentages refer to."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The dataplane's scenario parameters; after construction every one is present and checked."""
    knobs: Mapping[str, str] = field(default_factory=dict)
    """System knobs the DUT runs under (``perfkit.knobs``: ``{"gro": "off"}``); {}: as the testbed is."""

    def __post_init__(self) -> None:
        dp = dataplanes.get(self.dataplane)
        if isinstance(self.frame_size, bool) or not FRAME_MIN <= int(self.frame_size) <= FRAME_MAX:
            raise ConfigError("frame_size", self.frame_size, f"{FRAME_MIN} .. {FRAME_MAX} bytes")
        if self.flows < 1:
            raise ConfigError("flows", self.flows, "an integer >= 1")
        if self.dut_cores < 1:
            raise ConfigError("dut_cores", self.dut_cores, "an integer >= 1")
        if self.line_rate not in LINE_RATES:
            raise ConfigError("line_rate", self.line_rate, LINE_RATES)
        params = dp.validate(dict(self.params))
        minimum = dp.min_frame_size(params)
        if self.frame_size < minimum:
            raise ConfigError("frame_size", self.frame_size, f">= {minimum} bytes for this {dp.title} traffic")
        object.__setattr__(self, "params", _Frozen(params))
        object.__setattr__(self, "knobs", _Frozen({k.name: k.value for k in
                                                   (knobs.check(n, v) for n, v in dict(self.knobs).items())}))
        if "steering" in self.knobs and self.dut_cores < 2:
            raise ConfigError("knob steering", self.knobs["steering"], "with dut_cores >= 2 (one core needs no steering)")

    @property
    def dp(self) -> Dataplane:
        return dataplanes.get(self.dataplane)

    @property
    def variant(self) -> str:
        """The value of the dataplane's main categorical parameter (PGW-U: the direction)."""
        return str(self.params[self.dp.variant]) if self.dp.variant else ""

    def traffic(self) -> Traffic:
        return self.dp.traffic(self.frame_size, self.flows, self.params)

    @property
    def wire_frame_size(self) -> int:
        """Bytes per offered frame, FCS included (an encapsulating variant: the encapsulated frame)."""
        return self.traffic().wire_frame_size

    @property
    def key(self) -> str:
        """A short stable name, e.g. ``<dataplane>-<variant>-64B-1flow-1core``; used to match runs when comparing."""
        return scenario_key(self.dataplane, self.frame_size, self.flows, self.dut_cores, self.params, self.knobs)

    def labels(self) -> dict[str, Any]:
        """The scenario as flat fields: the generic ones and every parameter by name."""
        return {"dataplane": self.dataplane, "frame_size": self.frame_size, "flows": self.flows,
                "dut_cores": self.dut_cores, **self.params}


def scenario_key(dataplane: str, frame_size: int, flows: int, dut_cores: int, params: Mapping[str, Any],
                 knob_values: Mapping[str, str] | None = None) -> str:
    """The one definition of a scenario key (``Scenario.key``; stored trials are matched with it);
    knobs come last, ``<name>_<value>`` in name order (a character a run's names may not hold, such
    as a space in a sysctl's value, as ``_``)."""
    before, after = dataplanes.get(dataplane).key_parts(params)
    after += [re.sub(r"[^A-Za-z0-9_.%+-]", "_", f"{n}_{v}") for n, v in sorted((knob_values or {}).items())]
    return "-".join([dataplane, *before, f"{int(frame_size)}B", f"{int(flows)}flow", f"{int(dut_cores)}core", *after])


class _Frozen(dict):
    """A dict that refuses changes and hashes by content (Scenario is frozen and hashable)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def _refuse(self, *a: object, **k: object) -> None:
        raise TypeError("Scenario.params is read-only")

    def __reduce__(self) -> tuple:
        return _Frozen, (dict(self),)

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]
