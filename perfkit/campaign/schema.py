"""A campaign file (YAML) -> a validated, frozen ``Campaign``; every error names the field.

A campaign is declarative data (flent's idea): the scenarios to measure and the methods to measure
each with. Example (``campaigns/default.yaml`` is the full one)::

    name: default
    dataplane: pgwu                                       # a package of perfkit.dataplanes
    params:                                               # the dataplane's scenario parameters:
      direction: [ul, dl]                                 #   a list is a grid axis,
      sessions: 1000000                                   #   a value is fixed
      vlan: true
    frame_sizes: [64, 128, 256, 512, 1024, 1424, 3024]   # the dataplane's frames [bytes], FCS included
    flows: {single: 1, multi: 1024}                       # or a list: [1, 1024]
    dut_cores: auto                                       # or auto+shared, or a list: [1, 2]
    repeats: 1                                            # every unit this many times
    generator:
      backend: xdp                                        # xdp, trex, sim
      options: {}                                         # constructor options of the backend
      jumbo_mtu: auto                                     # MTU for frames that need > 1500 (auto: the generator's)
      host_check_seconds: 5                               # xdp: perfkit host check at the start [s]
    methods:                                              # run in this order for every scenario
      - method: maxrate
        params: {duration: 3}
      - method: ndrpdr
        label: ndr
        params: {goals: [0.0], initial_duration: 0.5, final_duration: 2}
    metrics:
      enabled: true          # push every trial (after it is on disk)
      start_local: true      # start the local Prometheus stack unless endpoints are configured

Trial durations are method parameters (``duration``, ``initial_duration``, ``final_duration``);
``params`` are the fields of the method's parameter dataclass (``perfkit.search``), checked here.
Rates in params (``max_rate``, ``min_rate``, ``start_rate``, ``start_step``, ``resolution``,
``nominal_rate``) may be numbers [pps] or strings (``2Mpps``, ``5Gbps``, ``50%``) that are
converted per scenario (the frame size changes what ``50%`` is).

``dut_cores: auto`` is every count the local machine allows: 1 .. nproc-1 (the generator needs a
core of its own); ``auto+shared`` adds nproc, where DUT and generator share a core (its units are
flagged ``shared_cores``; the numbers are pessimistic). On one CPU both give ``[1]``, shared.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

import itertools

from perfkit import dataplanes
from perfkit.errors import ConfigError
from perfkit.metrics.config import check_url
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.yamlload import load_yaml
from perfkit.units import FCS_LEN, FRAME_MAX, FRAME_MIN, LINE_RATES

#: The keys a campaign file may have at the top level.
TOP_KEYS = ("name", "description", "dataplane", "params", "frame_sizes", "flows", "dut_cores", "line_rate",
            "repeats", "generator", "methods", "metrics", "perf")
GENERATOR_KEYS = ("backend", "options", "jumbo_mtu", "setup_seconds", "trial_overhead_seconds", "host_check_seconds")
METHOD_KEYS = ("method", "label", "params")
METRICS_KEYS = ("enabled", "start_local", "stack_dir", "config", "prometheus_url", "pushgateway_url")
#: Method parameters that are rates: a number [pps] or a string Rate.parse understands.
RATE_PARAMS = ("max_rate", "min_rate", "start_rate", "start_step", "resolution", "nominal_rate")
#: Per-backend defaults for the duration estimate: generator set-up per scenario, overhead per trial [s].
SETUP_SECONDS = {"xdp": 5.0, "trex": 10.0, "sim": 0.0}
TRIAL_OVERHEAD_SECONDS = {"xdp": 0.5, "trex": 1.0, "sim": 0.0}
#: Backends whose DUT is this machine (``dut_cores`` is checked against its CPUs).
LOCAL_BACKENDS = ("xdp", "sim")
STANDARD_MTU = 1500
#: Default seconds of ``perfkit host check`` at the start of every campaign on the local testbed.
HOST_CHECK_SECONDS = 5.0


def machine_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class MethodSpec:
    """One method every scenario is measured with."""

    name: str
    """A key of ``perfkit.search.METHODS``: maxrate, sweep, ndr, pdr, bestworst, ndrpdr, latency."""
    label: str
    """Unique name in the campaign (defaults to ``name``); used in unit ids and reports."""
    params: dict[str, Any] = field(default_factory=dict)
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

    backend: str = "xdp"
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the backend's constructor (``perfkit.generators.create``)."""
    jumbo_mtu: int | None = None
    """MTU given (option ``mtu``) to scenarios whose frames do not fit a 1500-byte MTU [bytes];
    None (``auto``): the generator picks the smallest MTU that carries them (the xdp testbed does:
    3024-byte frames need about 3050, within the ~3500 bytes native XDP on veth allows; 9000 would
    need multi-buffer XDP programs)."""
    setup_seconds: float = 5.0
    """Expected set-up time of the generator for one scenario, for the estimate [s]."""
    trial_overhead_seconds: float = 0.5
    """Expected time per trial on top of its duration (start, drain, counters), for the estimate [s]."""
    host_check_seconds: float = HOST_CHECK_SECONDS
    """How long ``perfkit host check`` measures the cores at the start of a campaign on the local
    testbed (backend ``xdp``) [s]; longer counts rarer stalls."""


@dataclass(frozen=True)
class MetricsSpec:
    """Where trials are pushed and whether the local metrics stack is started."""

    enabled: bool = True
    """Push every trial to a Pushgateway after it is on disk."""
    start_local: bool = True
    """Start the local Prometheus/Pushgateway/node-exporter (and stop what was started at the end),
    unless endpoints are configured (``config``, URLs, or $PERFKIT_METRICS_CONFIG/$PERFKIT_*_URL)."""
    stack_dir: str | None = None
    """Directory of the local stack (default $PERFKIT_DATA/stack)."""
    config: str | None = None
    """A metrics endpoints file (``perfkit.metrics.config``)."""
    prometheus_url: str | None = None
    pushgateway_url: str | None = None


@dataclass(frozen=True)
class Campaign:
    """A validated campaign. Build it with ``load_campaign``/``parse_campaign``."""

    name: str
    description: str
    dataplane: str
    params: tuple[tuple[str, tuple[Any, ...]], ...]
    """The dataplane's parameters, each with its values (one value: fixed; several: a grid axis),
    in the dataplane's parameter order; every parameter is present."""
    frame_sizes: tuple[int, ...]
    """Frame sizes [bytes], FCS included (the dataplane's frame)."""
    flows: tuple[int, ...]
    """Flow counts; 1 is the single-flow case, more is multi-flow."""
    dut_cores: tuple[int, ...]
    """DUT core counts, resolved (``auto`` expanded for this machine)."""
    shared_cores: tuple[int, ...]
    """The counts of ``dut_cores`` for which DUT and generator share a core."""
    methods: tuple[MethodSpec, ...]
    generator: GeneratorSpec
    metrics: MetricsSpec
    line_rate: str = "10GbE"
    repeats: int = 1
    perf: tuple[str, ...] = ()
    """Labels of the methods whose trials ``perf record`` the DUT cores (``perf: true``: every
    method; the folded stacks go to ``<run>/perf/<trial_id>.folded``)."""
    dut_cores_spec: Any = "auto"
    """``dut_cores`` as written."""
    text: str = ""
    """The campaign file's text (kept in the run's metadata)."""
    source: str = "<string>"
    """Where the text came from (a path)."""

    def scenarios(self) -> list[Scenario]:
        """Every scenario, in run order: the parameter grid (first parameter outermost), frame size,
        flows, cores."""
        names = [n for n, _ in self.params]
        return [Scenario(self.dataplane, fs, fl, c, self.line_rate, dict(zip(names, values)))
                for values in itertools.product(*(v for _, v in self.params))
                for fs in self.frame_sizes for fl in self.flows for c in self.dut_cores]

    def needs_jumbo(self, scenario: Scenario) -> bool:
        """Whether the scenario's largest packet (offered or emitted, e.g. with a tunnel) exceeds a
        1500-byte MTU."""
        traffic = scenario.traffic()
        return max(traffic.wire_frame_size, traffic.output_frame_size) - FCS_LEN - 14 > STANDARD_MTU

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("text")
        return d


# -- parsing -------------------------------------------------------------------------------------
def load_campaign(path: str | Path, cpus: int | None = None) -> Campaign:
    """Read and validate a campaign file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError("campaign", str(p), f"a readable YAML file ({err.strerror})") from None
    return parse_campaign(text, source=str(p), cpus=cpus)


def parse_campaign(text: str, source: str = "<string>", cpus: int | None = None) -> Campaign:
    """Validate campaign YAML ``text``; ``cpus`` (default: this machine's) resolves ``dut_cores``."""
    try:
        raw = load_yaml(text, f"campaign {source}")  # a key given twice is refused
    except yaml.YAMLError as err:
        raise ConfigError("campaign", source, f"valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict):
        raise ConfigError("campaign", type(raw).__name__, "a mapping of keys: " + ", ".join(TOP_KEYS))
    _keys("campaign", raw, TOP_KEYS)
    cpus = cpus or machine_cpus()
    generator = _generator(raw.get("generator", {}))
    cores, shared = _dut_cores(raw.get("dut_cores", "auto"), generator.backend, cpus)
    name = raw.get("name", Path(source).stem if source != "<string>" else "campaign")
    dataplane = _choice("campaign.dataplane", raw.get("dataplane", dataplanes.DEFAULT), dataplanes.names())
    campaign = Campaign(
        name=_str("campaign.name", name), description=_str("campaign.description", raw.get("description", "")),
        dataplane=dataplane, params=_params(dataplane, raw.get("params", {})),
        frame_sizes=_frame_sizes(raw.get("frame_sizes")),
        flows=_flows(raw.get("flows", [1])),
        dut_cores=cores, shared_cores=shared, dut_cores_spec=raw.get("dut_cores", "auto"),
        methods=_methods(raw.get("methods")),
        generator=generator, metrics=_metrics(raw.get("metrics", {})),
        line_rate=_choice("campaign.line_rate", raw.get("line_rate", "10GbE"), LINE_RATES),
        repeats=_int("campaign.repeats", raw.get("repeats", 1), 1, 100),
        text=text, source=source)
    campaign = dataclasses.replace(campaign, perf=_perf(raw.get("perf", False), campaign))
    try:
        campaign.scenarios()  # the dataplane checks every combination (and frame sizes against it)
    except ConfigError as err:
        raise ConfigError(f"campaign.{err.field}", err.value, err.allowed) from None
    return campaign


def _perf(raw: Any, campaign: Campaign) -> tuple[str, ...]:
    """``perf:`` -- false, true (every method) or a list of method labels."""
    labels = [m.label for m in campaign.methods]
    if raw is False:
        return ()
    if campaign.generator.backend != "xdp":
        raise ConfigError("campaign.perf", raw, "false: perf records the DUT cores of the local testbed (generator xdp)")
    if raw is True:
        return tuple(labels)
    if isinstance(raw, list) and raw and all(isinstance(x, str) and x in labels for x in raw):
        return tuple(raw)
    raise ConfigError("campaign.perf", raw, f"true, false or a list of method labels: {', '.join(labels)}")


def _params(dataplane: str, raw: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``params:`` of a campaign: each parameter of the dataplane with its values (defaults filled)."""
    dp = dataplanes.get(dataplane)
    if not isinstance(raw, dict):
        raise ConfigError("campaign.params", raw, f"a mapping of {dataplane}'s parameters: "
                          + (", ".join(p.name for p in dp.params) or "none"))
    _keys("campaign.params", raw, tuple(p.name for p in dp.params))
    out = []
    for p in dp.params:
        value = raw.get(p.name, p.default)
        if isinstance(value, list):
            items = _list(f"campaign.params.{p.name}", value)
            values = tuple(p.parse_named(f"campaign.params.{p.name}[{i}]", v) for i, v in enumerate(items))
            _unique(f"campaign.params.{p.name}", values)
        else:
            values = (p.parse_named(f"campaign.params.{p.name}", value),)
        out.append((p.name, values))
    return tuple(out)


def _keys(where: str, raw: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}", raw[key], f"no such key; keys of {where}: {', '.join(allowed)}")


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, value, "a string")
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true or false")
    return value


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ConfigError(name, value, f"an integer, {low} .. {high}" if high is not None else f"an integer >= {low}")
    return value


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(name, value, "a number >= 0 [s]")
    return float(value)


def _choice(name: str, value: Any, allowed: Any) -> Any:
    if value not in allowed:
        raise ConfigError(name, value, allowed)
    return value


def _list(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(name, value, "a non-empty list")
    return value


def _unique(name: str, items: tuple[Any, ...]) -> None:
    for i, v in enumerate(items):
        if v in items[:i]:
            raise ConfigError(f"{name}[{i}]", v, "each value once (it is already in the list)")


def _frame_sizes(value: Any) -> tuple[int, ...]:
    if value is None:
        raise ConfigError("campaign.frame_sizes", value, f"a list of frame sizes, {FRAME_MIN} .. {FRAME_MAX}")
    items = _list("campaign.frame_sizes", value)
    out = []
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, int) or not FRAME_MIN <= v <= FRAME_MAX:
            raise ConfigError(f"campaign.frame_sizes[{i}]", v, f"{FRAME_MIN} .. {FRAME_MAX}")
        out.append(v)
    _unique("campaign.frame_sizes", tuple(out))
    return tuple(out)


def _flows(value: Any) -> tuple[int, ...]:
    if isinstance(value, dict):
        for key in value:
            if key not in ("single", "multi"):
                raise ConfigError(f"campaign.flows.{key}", value[key], "keys single and multi")
        if value.get("single", 1) != 1:
            raise ConfigError("campaign.flows.single", value["single"], "1 (single flow)")
        out = ([1] if "single" in value else []) + (
            [_int("campaign.flows.multi", value["multi"], 2, 16_777_216)] if "multi" in value else [])
        if not out:
            raise ConfigError("campaign.flows", value, "single: 1 and/or multi: N")
        return tuple(out)
    items = _list("campaign.flows", value)
    out = tuple(_int(f"campaign.flows[{i}]", v, 1, 16_777_216) for i, v in enumerate(items))
    _unique("campaign.flows", out)
    return out


def _dut_cores(value: Any, backend: str, cpus: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    local = backend in LOCAL_BACKENDS
    if value in ("auto", "auto+shared"):
        if not local:
            raise ConfigError("campaign.dut_cores", value,
                              f"a list of core counts for the {backend} generator (auto needs the local testbed)")
        sharing = backend == "xdp"
        if cpus < 2:
            return (1,), ((1,) if sharing else ())
        cores = tuple(range(1, cpus)) + ((cpus,) if value == "auto+shared" else ())
        return cores, ((cpus,) if value == "auto+shared" and sharing else ())
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError("campaign.dut_cores", value, "auto, auto+shared or a list of core counts")
    top = cpus if local else 4096
    allowed = f"1 .. {top} (this machine has {cpus} CPUs)" if local else "an integer >= 1"
    out: list[int] = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise ConfigError(f"campaign.dut_cores[{i}]", v, allowed)
        out.append(v)
    _unique("campaign.dut_cores", tuple(out))
    shared = tuple(c for c in out if backend == "xdp" and c >= cpus)
    return tuple(out), shared


def _generator(raw: Any) -> GeneratorSpec:
    from perfkit.generators import BACKENDS

    if isinstance(raw, str):
        raw = {"backend": raw}
    if not isinstance(raw, dict):
        raise ConfigError("campaign.generator", raw, "a mapping with backend, options, jumbo_mtu ...")
    _keys("campaign.generator", raw, GENERATOR_KEYS)
    backend = _choice("campaign.generator.backend", raw.get("backend", "xdp"), BACKENDS)
    options = raw.get("options", {}) or {}
    if not isinstance(options, dict):
        raise ConfigError("campaign.generator.options", options, "a mapping of constructor options")
    if "mtu" in options:
        raise ConfigError("campaign.generator.options.mtu", options["mtu"],
                          "nothing here: the MTU is set per scenario (jumbo_mtu for frames above 1500 bytes)")
    _trex_profile(backend, options)
    setup = raw.get("setup_seconds", SETUP_SECONDS.get(backend, 5.0))
    overhead = raw.get("trial_overhead_seconds", TRIAL_OVERHEAD_SECONDS.get(backend, 0.5))
    jumbo = raw.get("jumbo_mtu", "auto")
    return GeneratorSpec(backend=backend, options=dict(options),
                         jumbo_mtu=None if jumbo == "auto" else _int("campaign.generator.jumbo_mtu", jumbo, 1501, 65535),
                         setup_seconds=_number("campaign.generator.setup_seconds", setup),
                         trial_overhead_seconds=_number("campaign.generator.trial_overhead_seconds", overhead),
                         host_check_seconds=_host_check_seconds(raw.get("host_check_seconds", HOST_CHECK_SECONDS)))


def _host_check_seconds(value: Any) -> float:
    from perfkit.host import MAX_SECONDS

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise ConfigError("campaign.generator.host_check_seconds", value, f"a number of seconds, 0 < x <= {MAX_SECONDS:g}")
    return float(value)


def _trex_profile(backend: str, options: dict[str, Any]) -> None:
    """``options.trex_profile`` (a TRex STL profile file as the traffic) and ``options.trex_tunables``."""
    from perfkit.stlprofile import check_tunables

    where = "campaign.generator.options"
    if "trex_tunables" in options and "trex_profile" not in options:
        raise ConfigError(f"{where}.trex_tunables", options["trex_tunables"], "only with trex_profile")
    if "trex_profile" not in options:
        return
    path = options["trex_profile"]
    if backend != "xdp":
        raise ConfigError(f"{where}.trex_profile", path, "only with backend xdp (a lab TRex takes profiles itself)")
    if not isinstance(path, str) or not path.endswith(".py") or not Path(path).is_file():
        raise ConfigError(f"{where}.trex_profile", path, "the path of an existing TRex STL profile (.py)")
    tunables = options.get("trex_tunables", [])
    if not isinstance(tunables, list) or not all(isinstance(t, str) for t in tunables):
        raise ConfigError(f"{where}.trex_tunables", tunables, "a list of KEY=VALUE strings")
    try:
        check_tunables(tunables)
    except ConfigError as err:
        raise ConfigError(f"{where}.trex_tunables", err.value, err.allowed) from None


def _methods(raw: Any) -> tuple[MethodSpec, ...]:
    from perfkit.search import METHODS

    items = _list("campaign.methods", raw)
    out: list[MethodSpec] = []
    for i, item in enumerate(items):
        where = f"campaign.methods[{i}]"
        if isinstance(item, str):
            item = {"method": item}
        if not isinstance(item, dict):
            raise ConfigError(where, item, "a method name or a mapping with method, label, params")
        _keys(where, item, METHOD_KEYS)
        name = _choice(f"{where}.method", item.get("method"), METHODS)
        label = _str(f"{where}.label", item.get("label", name))
        if not label or not all(c.isalnum() or c in "_.%+-" for c in label):
            raise ConfigError(f"{where}.label", label, "letters, digits and _.%+- (it names files)")
        if label in [m.label for m in out]:
            raise ConfigError(f"{where}.label", label, "a label no other method has (set label: to tell them apart)")
        params = item.get("params", {}) or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{where}.params", params, "a mapping of the method's parameters")
        _check_params(where, name, params)
        out.append(MethodSpec(name, label, dict(params)))
    return tuple(out)


def _check_params(where: str, name: str, params: dict[str, Any]) -> None:
    """Build the method's parameter dataclass once (rates as placeholders) to check every field."""
    from perfkit.search import METHODS

    trial = dict(params)
    for key in RATE_PARAMS:
        if isinstance(trial.get(key), str):
            try:
                Rate.parse(trial[key])
            except ConfigError as err:
                raise ConfigError(f"{where}.params.{key}", err.value, err.allowed) from None
            trial.pop(key)
    try:
        METHODS[name][0](trial)
    except ConfigError as err:
        raise ConfigError(f"{where}.params.{err.field}", err.value, err.allowed) from None
    except TypeError as err:
        raise ConfigError(f"{where}.params", params, f"the parameters of {name} ({err})") from None


def _metrics(raw: Any) -> MetricsSpec:
    if isinstance(raw, bool):
        raw = {"enabled": raw}
    if not isinstance(raw, dict):
        raise ConfigError("campaign.metrics", raw, "true, false or a mapping with enabled, start_local ...")
    _keys("campaign.metrics", raw, METRICS_KEYS)
    strs = {}
    for key in ("stack_dir", "config", "prometheus_url", "pushgateway_url"):
        v = raw.get(key)
        strs[key] = None if v is None else _str(f"campaign.metrics.{key}", v)
    for key in ("prometheus_url", "pushgateway_url"):
        if strs[key] is not None:
            check_url(f"campaign.metrics.{key}", strs[key])
    return MetricsSpec(enabled=_bool("campaign.metrics.enabled", raw.get("enabled", True)),
                       start_local=_bool("campaign.metrics.start_local", raw.get("start_local", True)), **strs)
