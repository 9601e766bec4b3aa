"""A validated campaign: what to measure (scenarios x methods), with which generator, pushing where.

Only ``perfkit.campaign.schema`` builds these, from a campaign file or its mapping. They are frozen
and have no defaults: what a key left out of a file means is the schema's (``schema.DEFAULTS``), in
one place.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.units import FCS_LEN

#: Method parameters that are rates: a number [pps] or a string Rate.parse understands.
RATE_PARAMS = ("max_rate", "min_rate", "start_rate", "start_step", "resolution", "nominal_rate")
#: The MTU above which a scenario needs ``jumbo_mtu`` [bytes].
STANDARD_MTU = 1500


@dataclass(frozen=True)
class MethodSpec:
    """One method every scenario is measured with."""

    name: str
    """A key of ``perfkit.search.METHODS``: maxrate, sweep, ndr, pdr, bestworst, ndrpdr, latency."""
    label: str
    """Unique name in the campaign (defaults to ``name``); used in unit ids and reports."""
    params: dict[str, Any]
    """Fields of the method's parameter dataclass, as written (rates may be strings)."""

    def resolved_params(self, scenario: Scenario) -> dict[str, Any]:
        """``params`` with rate strings converted to pps for ``scenario``'s frames."""
        out = dict(self.params)
        wire = None
        for key in RATE_PARAMS:
            value = out.get(key)
            if isinstance(value, str):
                if wire is None:
                    wire = scenario.wire_frame_size
                out[key] = Rate.parse(value, scenario.line_rate).pps(wire)
        return out


@dataclass(frozen=True)
class GeneratorSpec:
    """Which generator backend measures, with which options."""

    backend: str
    """A key of ``perfkit.generators.BACKENDS``: xdp, trex, sim."""
    options: dict[str, Any]
    """Keyword options of the backend's constructor (``perfkit.generators.create``)."""
    jumbo_mtu: int | None
    """MTU given (option ``mtu``) to scenarios whose frames do not fit a 1500-byte MTU [bytes];
    None (``auto``): the generator picks the smallest MTU that carries them (the xdp testbed does:
    3024-byte frames need about 3050, within the ~3500 bytes native XDP on veth allows; 9000 would
    need multi-buffer XDP programs)."""
    setup_seconds: float
    """Expected set-up time of the generator for one scenario, for the estimate [s]."""
    trial_overhead_seconds: float
    """Expected time per trial on top of its duration (start, drain, counters), for the estimate [s]."""
    host_check_seconds: float
    """How long ``perfkit host check`` measures the cores at the start of a campaign on the local
    testbed (backend ``xdp``) [s]; longer counts rarer stalls."""


@dataclass(frozen=True)
class MetricsSpec:
    """Where trials are pushed and whether the local metrics stack is started."""

    enabled: bool
    """Push every trial to a Pushgateway after it is on disk."""
    start_local: bool
    """Start the local Prometheus/Pushgateway/node-exporter (and stop what was started at the end),
    unless endpoints are configured (``config``, URLs, or $PERFKIT_METRICS_CONFIG/$PERFKIT_*_URL)."""
    stack_dir: str | None
    """Directory of the local stack (default $PERFKIT_DATA/stack)."""
    config: str | None
    """A metrics endpoints file (``perfkit.metrics.config``)."""
    prometheus_url: str | None
    pushgateway_url: str | None
    node_selector: str | None = None
    """PromQL label matchers of the DUT's node-exporter series (not a campaign key: a lab run sets it
    to its DUT host's, ``perfkit.lab.provision.lab_metrics``); None: the endpoints' own."""


@dataclass(frozen=True)
class Part:
    """One grid of a campaign with ``parts:``: the campaign's axes with some of them replaced."""

    name: str
    params: tuple[tuple[str, tuple[Any, ...]], ...]
    knobs: tuple[tuple[str, tuple[str, ...]], ...]
    frame_sizes: tuple[int | str, ...]
    flows: tuple[int, ...]
    dut_cores: tuple[int, ...]
    dataplane: str = ""
    """The part's dataplane; empty: the campaign's."""


@dataclass(frozen=True)
class Campaign:
    """A validated campaign. Build it with ``load_campaign``, ``parse_campaign`` or ``from_mapping``."""

    name: str
    description: str
    dataplane: str
    params: tuple[tuple[str, tuple[Any, ...]], ...]
    """The dataplane's parameters, each with its values (one value: fixed; several: a grid axis),
    in the dataplane's parameter order; every parameter is present."""
    frame_sizes: tuple[int | str, ...]
    """Frame sizes [bytes], FCS included (the dataplane's frame), and frame mixes by name (``imix``)."""
    flows: tuple[int, ...]
    """Flow counts; 1 is the single-flow case, more is multi-flow."""
    dut_cores: tuple[int, ...]
    """DUT core counts, resolved (``auto`` expanded for this machine)."""
    shared_cores: tuple[int, ...]
    """The counts of ``dut_cores`` for which DUT and generator share a core."""
    methods: tuple[MethodSpec, ...]
    generator: GeneratorSpec
    metrics: MetricsSpec
    line_rate: str
    """A key of ``perfkit.units.LINE_RATES``: the rate ``100%`` is."""
    repeats: int
    """Every unit this many times."""
    perf: tuple[str, ...]
    """Labels of the methods whose trials ``perf record`` the DUT cores (``perf: true``: every
    method; the folded stacks go to ``<run>/perf/<trial_id>.folded``)."""
    dut_cores_spec: Any
    """``dut_cores`` as written."""
    text: str
    """The campaign file's text (kept in the run's metadata)."""
    source: str
    """Where the text came from (a path)."""
    knobs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """System knobs with their values (``perfkit.knobs``), an axis like ``params``: every
    combination is a scenario. A dataplane's build options written under ``knobs:`` are in ``params``."""
    parts: tuple[Part, ...] = ()
    """Several grids instead of one (``parts:``): each part's scenarios, in order; a scenario in two
    parts runs once. Empty: the one grid of the axes above. A part may measure another dataplane
    (``Part.dataplane``): two dataplanes side by side in one run."""

    @property
    def dataplanes(self) -> tuple[str, ...]:
        """The dataplanes the campaign measures, in run order (``dataplane``, or its parts')."""
        return tuple(dict.fromkeys(p.dataplane or self.dataplane for p in self.parts)) or (self.dataplane,)

    def scenarios(self) -> list[Scenario]:
        """Every scenario, in run order: part by part (``parts``), each a grid of the parameters
        (first parameter outermost), knobs, frame size, flows, cores."""
        grids = self.parts or (Part("", self.params, self.knobs, self.frame_sizes, self.flows, self.dut_cores),)
        out: dict[Scenario, Scenario] = {}   # one scenario in two parts runs once; two of one key are refused (``expand``)
        for g in grids:
            names, knob_names = [n for n, _ in g.params], [n for n, _ in g.knobs]
            for values in itertools.product(*(v for _, v in g.params)):
                for kv in itertools.product(*(v for _, v in g.knobs)):
                    for fs, fl, c in itertools.product(g.frame_sizes, g.flows, g.dut_cores):
                        sc = Scenario(g.dataplane or self.dataplane, fs, fl, c, self.line_rate,
                                      dict(zip(names, values)), dict(zip(knob_names, kv)))
                        out.setdefault(sc, sc)
        return list(out.values())

    def needs_jumbo(self, scenario: Scenario) -> bool:
        """Whether the scenario's largest packet (offered or emitted, e.g. with a tunnel) exceeds a
        1500-byte MTU."""
        traffic = scenario.traffic()
        return max(traffic.wire_frame_size, traffic.output_frame_size) - FCS_LEN - 14 > STANDARD_MTU

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("text")
        return d
