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

from perfkit import dataplanes, framemix, knobs
from perfkit.dataplane import Dataplane, Traffic
from perfkit.errors import ConfigError
from perfkit.framemix import FrameMix
from perfkit.units import FRAME_MAX, FRAME_MIN, LINE_RATES


@dataclass(frozen=True)
class Scenario:
    """What stays fixed while a search varies the rate: the traffic and the DUT set-up."""

    dataplane: str = dataplanes.DEFAULT
    """The dataplane under test (a package of ``perfkit.dataplanes``)."""
    frame_size: int = 64
    """Frame size [bytes], FCS included (the dataplane says which frame: ``frame_size_doc``); a frame
    mix's mean, rounded. Given as a mix's name (``"imix"``), it sets ``frame_mix``."""
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
    frame_mix: str = ""
    """The frame mix offered (``perfkit.framemix``: ``imix``), each of its sizes the dataplane's frame
    of that size; "": every frame is ``frame_size``."""

    def __post_init__(self) -> None:
        dp = dataplanes.get(self.dataplane)
        self._set_mix()
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
        smallest = min(self.mix.sizes) if self.mix else self.frame_size
        if smallest < minimum:
            raise ConfigError("frame_size", self.frame_mix or self.frame_size,
                              f">= {minimum} bytes for this {dp.title} traffic"
                              + (f" (the mix's smallest frame is {smallest})" if self.mix else ""))
        object.__setattr__(self, "params", _Frozen(params))
        object.__setattr__(self, "knobs", _Frozen({k.name: k.value for k in
                                                   (knobs.check(n, v) for n, v in dict(self.knobs).items())}))
        if "steering" in self.knobs and self.dut_cores < 2:
            raise ConfigError("knob steering", self.knobs["steering"], "with dut_cores >= 2 (one core needs no steering)")

    def _set_mix(self) -> None:
        """``frame_size`` given as a mix's name: the mix, and its mean as ``frame_size``."""
        size: object = self.frame_size
        if isinstance(size, str):
            size = framemix.parse_frame_size(size)
        name = size if isinstance(size, str) else self.frame_mix
        if name:
            mix = framemix.get(str(name))
            if not isinstance(size, str) and size != mix.frame_size:
                raise ConfigError("frame_size", size, f"{mix.frame_size} (frame_mix {mix.name}'s mean), or no frame_mix")
            size = mix.frame_size
        object.__setattr__(self, "frame_size", size)
        object.__setattr__(self, "frame_mix", str(name or ""))

    @property
    def mix(self) -> FrameMix | None:
        """The frame mix, or None for frames of one size."""
        return framemix.get(self.frame_mix) if self.frame_mix else None

    @property
    def dp(self) -> Dataplane:
        return dataplanes.get(self.dataplane)

    @property
    def variant(self) -> str:
        """The value of the dataplane's main categorical parameter (PGW-U: the direction)."""
        return str(self.params[self.dp.variant]) if self.dp.variant else ""

    def traffic(self) -> Traffic:
        """The traffic profile; of a mix, its largest frames' (what the DUT and MTU are set up for)."""
        return self.dp.traffic(max(self.mix.sizes) if self.mix else self.frame_size, self.flows, self.params)

    def traffics(self) -> tuple[tuple[Traffic, int], ...]:
        """(traffic profile, weight) per frame size of the mix, in the mix's order; one size: weight 1."""
        if not self.mix:
            return ((self.traffic(), 1),)
        return tuple((self.dp.traffic(s, self.flows, self.params), w) for s, w in zip(self.mix.sizes, self.mix.weights))

    @property
    def wire_frame_size(self) -> float:
        """Bytes per offered frame, FCS included (an encapsulating variant: the encapsulated frame);
        of a mix, the mean over its frames (what the line rate divides by, with ``L1_OVERHEAD``)."""
        if not self.mix:
            return self.traffic().wire_frame_size
        pairs = self.traffics()
        return sum(t.wire_frame_size * w for t, w in pairs) / sum(w for _, w in pairs)

    @property
    def frame_label(self) -> str:
        """``64`` ... or the mix's name (``perfkit.framemix.label``)."""
        return framemix.label(self.frame_size, self.frame_mix)

    @property
    def key(self) -> str:
        """A short stable name, e.g. ``<dataplane>-<variant>-64B-1flow-1core``; used to match runs when comparing."""
        return scenario_key(self.dataplane, self.frame_size, self.flows, self.dut_cores, self.params, self.knobs,
                            self.frame_mix)

    def labels(self) -> dict[str, Any]:
        """The scenario as flat fields: the generic ones and every parameter by name."""
        return {"dataplane": self.dataplane, "frame_size": self.frame_size, "frame_mix": self.frame_mix,
                "flows": self.flows, "dut_cores": self.dut_cores, **self.params}


def scenario_key(dataplane: str, frame_size: int, flows: int, dut_cores: int, params: Mapping[str, Any],
                 knob_values: Mapping[str, str] | None = None, frame_mix: str = "") -> str:
    """The one definition of a scenario key (``Scenario.key``; stored trials are matched with it):
    ``<dataplane>-<before>-<size>B-<flows>flow-<cores>core-<after>`` with the dataplane's own words
    (``Dataplane.key_parts``); a frame mix in place of the size (``imix``); then every parameter
    that differs from its default and that those words do not name (``param_words``); knobs come
    last, ``<name>_<value>`` in name order (a character a run's names may not hold, such as a space
    in a sysctl's value, as ``_``). Two scenarios that differ in any parameter have different keys."""
    dp = dataplanes.get(dataplane)
    full = {p.name: params.get(p.name, p.default) for p in dp.params}
    before, after = dp.key_parts(full)
    after = [*after, *param_words(dp, full)]
    after += [_safe(f"{n}_{v}") for n, v in sorted((knob_values or {}).items())]
    return "-".join([dp.name, *before, frame_mix if isinstance(frame_mix, str) and frame_mix else f"{int(frame_size)}B", f"{int(flows)}flow", f"{int(dut_cores)}core", *after])


def param_words(dp: Dataplane, params: Mapping[str, Any]) -> list[str]:
    """Key words for the parameters that differ from their defaults and that ``dp.key_parts`` does
    not name (its words are the same with the parameter at its default), in ``dp.params`` order:
    ``<name><value>`` for a number (``sessions100``), ``<name>`` or ``no<name>`` for a flag,
    ``<name>_<value>`` for text."""
    words, base = [], dp.key_parts(params)
    for p in dp.params:
        value = params[p.name]
        if value == p.default or dp.key_parts({**params, p.name: p.default}) != base:
            continue
        if isinstance(value, bool):
            words.append(p.name if value else f"no{p.name}")
        elif isinstance(value, (int, float)):
            words.append(_safe(f"{p.name}{value}"))
        else:
            words.append(_safe(f"{p.name}_{value}"))
    return words


def _safe(word: str) -> str:
    """``word`` with every character a run's names may not hold as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.%+-]", "_", word)


class _Frozen(dict):
    """A dict that refuses changes and hashes by content (Scenario is frozen and hashable)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def _refuse(self, *a: object, **k: object) -> None:
        raise TypeError("Scenario.params is read-only")

    def __reduce__(self) -> tuple:
        return _Frozen, (dict(self),)

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]
