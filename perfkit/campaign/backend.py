"""A campaign's generator backend: its class, its options per scenario, created on first use.

``preflight(campaign)`` checks before any traffic what can be checked: the backend imports, it takes
the campaign's options, its ``check_scenario`` accepts every scenario, and a ``sim`` model builds.
``LazyGenerator`` creates a scenario's generator on the first trial that needs traffic (a scenario
whose units are all replayed or done never sets up the testbed).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from perfkit.campaign.model import Campaign
from perfkit.crashpoints import crashpoint
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators import BACKENDS
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult


def generator_class(backend: str) -> type:
    """The backend's class, imported now (a missing backend is a ``ConfigError`` before any run)."""
    module_name, cls_name = BACKENDS[backend].split(":")
    try:
        return getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise ConfigError("campaign.generator.backend", backend, f"an available backend ({err})") from None


def generator_options(campaign: Campaign, scenario: Scenario, cls: type,
                      exporter_targets: str | None = None) -> dict[str, Any]:
    """The campaign's options, plus ``mtu`` (``jumbo_mtu`` if set) for scenarios whose frames need more
    than 1500 bytes, when the backend takes it, and ``exporter_targets`` (the local metrics stack's
    ``targets/``: its Prometheus scrapes the dataplane's counters) when the backend takes that."""
    options = dict(campaign.generator.options)
    if exporter_targets and "exporter_targets" in inspect.signature(cls.__init__).parameters:
        options.setdefault("exporter_targets", exporter_targets)
    if campaign.generator.jumbo_mtu is not None and campaign.needs_jumbo(scenario):
        params = inspect.signature(cls.__init__).parameters
        if "mtu" in params or campaign.generator.backend == "xdp":
            options["mtu"] = campaign.generator.jumbo_mtu
    return options


class LazyGenerator:
    """A scenario's generator, created (and entered) on the first live trial; closed by ``close``."""

    def __init__(self, cls: type, scenario: Scenario, options: dict[str, Any]):
        self.cls = cls
        self.scenario = scenario
        self.options = options
        self._gen: Any = None
        self._error: PerfkitError | None = None

    def _live(self) -> Any:
        if self._error is not None:
            raise self._error
        if self._gen is None:
            try:
                gen = self.cls(self.scenario, **self.options)
            except TypeError as err:
                self._error = ConfigError("campaign.generator.options", self.options,
                                          f"options {self.cls.__name__} accepts ({err})")
                raise self._error from None
            except PerfkitError as err:
                self._error = err
                raise
            self._gen = gen.__enter__()
        return self._gen

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        gen = self._live()
        crashpoint("trial.mid", after=duration / 2)
        return gen.measure(rate_pps, duration) if packets is None else gen.measure(rate_pps, duration, packets)

    def close(self) -> None:
        if self._gen is not None:
            gen, self._gen = self._gen, None
            gen.__exit__(None, None, None)



def preflight(campaign: Campaign) -> type:
    """Check what can be checked before traffic: the backend imports; sim options build a model."""
    cls = generator_class(campaign.generator.backend)
    try:  # an option the backend does not take is refused now, not at its first unit
        inspect.signature(cls).bind(campaign.scenarios()[0], **campaign.generator.options)
    except TypeError:
        known = [n for n, p in inspect.signature(cls).parameters.items() if p.kind is p.KEYWORD_ONLY
                 or (p.kind is p.POSITIONAL_OR_KEYWORD and n != "scenario")]
        bad = [k for k in campaign.generator.options if k not in known]
        raise ConfigError(f"campaign.generator.options.{bad[0] if bad else ''}".rstrip("."),
                          campaign.generator.options.get(bad[0]) if bad else campaign.generator.options,
                          f"options of the {campaign.generator.backend} generator: {', '.join(known)}") from None
    check = getattr(cls, "check_scenario", None)
    for scenario in campaign.scenarios() if check else ():
        try:
            check(scenario)
        except ConfigError as err:
            raise ConfigError(f"campaign.{err.field} ({scenario.key})", err.value, err.allowed) from None
    if campaign.generator.backend == "sim":
        scenario = campaign.scenarios()[0]
        try:
            cls(scenario, **campaign.generator.options).close()
        except TypeError as err:
            raise ConfigError("campaign.generator.options", campaign.generator.options,
                              f"options {cls.__name__} accepts ({err})") from None
        except ConfigError as err:
            raise ConfigError(f"campaign.generator.options ({err.field})", err.value, err.allowed) from None
    return cls
