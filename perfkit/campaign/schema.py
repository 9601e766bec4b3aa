"""A campaign file (YAML) or its mapping -> a validated, frozen ``Campaign``; every error names the field.

A campaign is declarative data (flent's idea): the scenarios to measure and the methods to measure
each with. Example (``campaigns/default.yaml`` is the full one)::

    name: default
    dataplane: NAME                                       # a package of perfkit.dataplanes
    params:                                               # the dataplane's scenario parameters:
      direction: [ul, dl]                                 #   a list is a grid axis,
      sessions: 1000000                                   #   a value is fixed
      vlan: true
    knobs:                                                # system knobs (perfkit.knobs), an axis like params;
      gro: [on, off]                                      #   a dataplane's build options may be written here
    frame_sizes: [64, 128, 256, 512, 1024, 1424, 3024, imix]  # the dataplane's frames [bytes], FCS included; imix: 7:4:1 of 64/594/1518
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
    lab: null                # an Ansible inventory: run in that lab (perfkit.lab), generator lab

``lab: INVENTORY`` (``perfkit run CAMPAIGN --lab INVENTORY``) runs the same campaign in a lab: the
generator becomes ``lab`` (``perfkit.generators.lab``: the DUT host's and the testers' agents over
SSH) with the inventory as its option, keeping the options that generator takes (``testers``,
``capture_count``); ``dut_cores: auto`` is 1 there.

Trial durations are method parameters (``duration``, ``initial_duration``, ``final_duration``);
``params`` are the fields of the method's parameter dataclass (``perfkit.search``), checked here.
Rates in params (``max_rate``, ``min_rate``, ``start_rate``, ``start_step``, ``resolution``,
``nominal_rate``) may be numbers [pps] or strings (``2Mpps``, ``5Gbps``, ``50%``) that are
converted per scenario (the frame size changes what ``50%`` is).

``dut_cores: auto`` is every count the local machine allows: 1 .. nproc-1 (the generator needs a
core of its own); ``auto+shared`` adds nproc, where DUT and generator share a core (its units are
flagged ``shared_cores``; the numbers are pessimistic). On one CPU both give ``[1]``, shared.

What a key left out means is said here once (``DEFAULTS``, ``GENERATOR_DEFAULTS``,
``METRICS_DEFAULTS``); ``frame_sizes`` and ``methods`` have no default (``REQUIRED``). A campaign is
the same whether it comes from a file (``load_campaign``, ``parse_campaign``) or from a mapping with
the file's keys (``from_mapping``: the experiment notebook's ``campaign`` parameter).
"""
from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Hashable, Mapping

import yaml

from perfkit import dataplanes, framemix, knobs
from perfkit.campaign.model import RATE_PARAMS, Campaign, GeneratorSpec, MethodSpec, MetricsSpec, Part
from perfkit.campaign.units import expand
from perfkit.errors import ConfigError
from perfkit.generators import BACKENDS
from perfkit.host.check import MAX_SECONDS
from perfkit.metrics.config import check_url
from perfkit.rate import Rate
from perfkit.search import METHODS
from perfkit.stl.profile import check_tunables
from perfkit.units import LINE_RATES
from perfkit.yamlload import load_yaml

#: The keys a campaign file may have at the top level.
TOP_KEYS = ("name", "description", "dataplane", "params", "knobs", "parts", "frame_sizes", "flows", "dut_cores", "line_rate",
            "repeats", "generator", "methods", "metrics", "perf", "lab")
GENERATOR_KEYS = ("backend", "options", "jumbo_mtu", "setup_seconds", "trial_overhead_seconds", "host_check_seconds")
METHOD_KEYS = ("method", "label", "params")
METRICS_KEYS = ("enabled", "start_local", "stack_dir", "config", "prometheus_url", "pushgateway_url")
#: The top-level keys a campaign must have.
REQUIRED = ("frame_sizes", "methods")
#: What a top-level key left out means. Not here: ``name`` (the file's stem), ``dataplane``
#: (``perfkit.dataplanes.DEFAULT``); each dataplane parameter left out of ``params`` takes its own default.
DEFAULTS: dict[str, Any] = {"description": "", "params": {}, "flows": [1], "dut_cores": "auto", "line_rate": "10GbE",
                            "repeats": 1, "generator": {}, "metrics": {}, "perf": False, "lab": None}
#: What a ``generator`` key left out means; ``setup_seconds`` and ``trial_overhead_seconds`` depend
#: on the backend (``SETUP_SECONDS``, ``TRIAL_OVERHEAD_SECONDS``).
GENERATOR_DEFAULTS: dict[str, Any] = {"backend": "xdp", "options": {}, "jumbo_mtu": "auto", "host_check_seconds": 5.0}
#: Per-backend defaults for the duration estimate: generator set-up per scenario, overhead per trial [s].
SETUP_SECONDS = {"xdp": 5.0, "trex": 10.0, "sim": 0.0, "lab": 10.0}
TRIAL_OVERHEAD_SECONDS = {"xdp": 0.5, "trex": 1.0, "sim": 0.0, "lab": 1.0}
#: The ``lab`` generator's options a campaign's generator options may carry into a lab.
LAB_OPTIONS = ("testers", "capture_count")
#: What a ``metrics`` key left out means.
METRICS_DEFAULTS: dict[str, Any] = {"enabled": True, "start_local": True, "stack_dir": None, "config": None,
                                    "prometheus_url": None, "pushgateway_url": None}
#: Values that may be written short, as the one key they set: ``generator: sim`` is ``{backend: sim}``,
#: ``metrics: false`` is ``{enabled: false}``, a method ``maxrate`` is ``{method: maxrate}``.
SHORT_FORMS: dict[str, tuple[type, str]] = {"generator": (str, "backend"), "metrics": (bool, "enabled"),
                                            "methods[]": (str, "method")}
#: Backends whose DUT is this machine (``dut_cores`` is checked against its CPUs).
LOCAL_BACKENDS = ("xdp", "sim")


def machine_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def long_form(where: str, value: Any) -> Any:
    """``value`` of ``where`` (``generator``, ``metrics``, ``methods[]``) as a mapping if it is written
    short (``SHORT_FORMS``), else as it is."""
    kind, key = SHORT_FORMS[where]
    return {key: value} if isinstance(value, kind) else value


def default_name(source: str) -> str:
    """A campaign's name when its file does not say one: the file's stem."""
    return Path(source).stem if source != "<string>" else "campaign"


def _default(raw: Mapping[str, Any], key: str, defaults: Mapping[str, Any]) -> Any:
    return raw[key] if key in raw else copy.deepcopy(defaults[key])


# -- parsing -------------------------------------------------------------------------------------
def load_campaign(path: str | Path, cpus: int | None = None) -> Campaign:
    """Read and validate a campaign file."""
    return parse_campaign(read_text(path), source=str(path), cpus=cpus)


def read_text(path: str | Path) -> str:
    """A campaign file's text; an unreadable file is a ``ConfigError`` naming it."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError("campaign", str(path), f"a readable YAML file ({err.__class__.__name__})") from None


def load_mapping(text: str, source: str = "<string>") -> dict[str, Any]:
    """Campaign YAML ``text`` as a mapping of its keys, not yet validated, with its ``name`` (a file
    that has none is named after its stem): what ``from_mapping`` takes."""
    try:
        raw = load_yaml(text, f"campaign {source}")  # a key given twice is refused
    except yaml.YAMLError as err:
        raise ConfigError("campaign", source, f"valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict):
        raise ConfigError("campaign", type(raw).__name__, "a mapping of keys: " + ", ".join(TOP_KEYS))
    return {"name": default_name(source), **raw}


def parse_campaign(text: str, source: str = "<string>", cpus: int | None = None) -> Campaign:
    """Validate campaign YAML ``text``; ``cpus`` (default: this machine's) resolves ``dut_cores``."""
    return from_mapping(load_mapping(text, source), text=text, source=source, cpus=cpus)


def to_text(raw: Mapping[str, Any], header: str = "") -> str:
    """A campaign mapping as YAML (what a run keeps as its campaign's text); ``header``: a comment."""
    try:
        body = yaml.safe_dump(_plain(raw), sort_keys=False, default_flow_style=None, width=110)
    except yaml.YAMLError as err:
        raise ConfigError("campaign", raw, f"a mapping of YAML values ({' '.join(str(err).split())[:80]})") from None
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists and paths as strings (as YAML writes them)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def from_mapping(raw: Mapping[str, Any], *, text: str | None = None, source: str = "<string>",
                 cpus: int | None = None) -> Campaign:
    """Validate a campaign given as a mapping with a campaign file's keys; ``text``: the file it was
    read from (default: the mapping as YAML, ``to_text``); ``cpus`` (default: this machine's)
    resolves ``dut_cores``."""
    if not isinstance(raw, Mapping):
        raise ConfigError("campaign", type(raw).__name__, "a mapping of keys: " + ", ".join(TOP_KEYS))
    check_keys("campaign", raw, TOP_KEYS)
    cpus = cpus or machine_cpus()
    generator = _in_lab(_generator(_default(raw, "generator", DEFAULTS)), _default(raw, "lab", DEFAULTS))
    dut_cores = _default(raw, "dut_cores", DEFAULTS)
    cores, shared = _dut_cores(dut_cores, generator.backend, cpus)
    dataplane = _dataplane("campaign.dataplane", raw.get("dataplane", dataplanes.DEFAULT), source)
    campaign = Campaign(
        name=_str("campaign.name", raw.get("name", default_name(source))),
        description=_str("campaign.description", _default(raw, "description", DEFAULTS)),
        dataplane=dataplane, params=_params(dataplane, _with_build_knobs(dataplane, _default(raw, "params", DEFAULTS),
                                                                         raw.get("knobs") or {})),
        knobs=_knobs(dataplane, raw.get("knobs") or {}, generator.backend),
        frame_sizes=_frame_sizes(raw.get("frame_sizes")),
        flows=_flows(_default(raw, "flows", DEFAULTS)),
        dut_cores=cores, shared_cores=shared, dut_cores_spec=dut_cores,
        methods=_methods(raw.get("methods")),
        generator=generator, metrics=_metrics(_default(raw, "metrics", DEFAULTS)),
        line_rate=_choice("campaign.line_rate", _default(raw, "line_rate", DEFAULTS), LINE_RATES),
        repeats=_int("campaign.repeats", _default(raw, "repeats", DEFAULTS), 1, 100),
        perf=(), text=to_text(raw) if text is None else text, source=source)
    campaign = dataclasses.replace(campaign, perf=_perf(_default(raw, "perf", DEFAULTS), campaign))
    if raw.get("parts") is not None:
        campaign = _with_parts(campaign, raw, generator.backend, cpus)
    try:
        campaign.scenarios()  # the dataplane checks every combination (and frame sizes against it)
    except ConfigError as err:
        raise ConfigError(f"campaign.{err.field}", err.value, err.allowed) from None
    expand(campaign)  # no two units of one id
    return campaign


def _perf(raw: Any, campaign: Campaign) -> tuple[str, ...]:
    """``perf:`` -- false, true (every method) or a list of method labels."""
    labels = [m.label for m in campaign.methods]
    if raw is False:
        return ()
    if campaign.generator.backend not in ("xdp", "lab"):
        raise ConfigError("campaign.perf", raw, "false: perf records the DUT cores of the local testbed (generator xdp) "
                          "or of a lab's DUT host (lab)")
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
    check_keys("campaign.params", raw, tuple(p.name for p in dp.params))
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


PART_KEYS = ("name", "dataplane", "params", "knobs", "frame_sizes", "flows", "dut_cores")


def _with_parts(campaign: Campaign, raw: Mapping[str, Any], backend: str, cpus: int) -> Campaign:
    """``parts:``: several grids, each the campaign's axes with the keys it gives replaced (a part's
    ``params`` and ``knobs`` replace those of the same names only). A part with another
    ``dataplane`` takes only its own ``params`` (the campaign's are another dataplane's)."""
    items = raw["parts"]
    if not isinstance(items, list) or not items:
        raise ConfigError("campaign.parts", items, "a list of mappings with keys " + ", ".join(PART_KEYS))
    parts, shared = [], set(campaign.shared_cores)
    for i, item in enumerate(items):
        where = f"campaign.parts[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(where, item, "a mapping with keys " + ", ".join(PART_KEYS))
        check_keys(where, item, PART_KEYS)
        dataplane = _dataplane(f"{where}.dataplane", item.get("dataplane", campaign.dataplane), campaign.source)
        inherited = _default(raw, "params", DEFAULTS) if dataplane == campaign.dataplane else {}
        params = {**(inherited or {}), **(item.get("params") or {})}
        knob_raw = {**(raw.get("knobs") or {}), **(item.get("knobs") or {})}
        try:
            grid_params = _params(dataplane, _with_build_knobs(dataplane, params, knob_raw))
            grid_knobs = _knobs(dataplane, knob_raw, backend)
            sizes = _frame_sizes(item["frame_sizes"]) if "frame_sizes" in item else campaign.frame_sizes
            flows = _flows(item["flows"]) if "flows" in item else campaign.flows
            cores = campaign.dut_cores
            if "dut_cores" in item:
                cores, part_shared = _dut_cores(item["dut_cores"], backend, cpus)
                shared |= set(part_shared)
        except ConfigError as err:
            raise ConfigError(err.field.replace("campaign.", f"{where}.", 1), err.value, err.allowed) from None
        parts.append(Part(_str(f"{where}.name", item.get("name", f"part {i + 1}")), grid_params, grid_knobs, sizes,
                          flows, cores, "" if dataplane == campaign.dataplane else dataplane))
    return dataclasses.replace(campaign, parts=tuple(parts), shared_cores=tuple(sorted(shared)))


def _build_names(dataplane: str) -> set[str]:
    return {p.name for p in dataplanes.get(dataplane).params if p.build}


def _with_build_knobs(dataplane: str, params: Any, raw: Any) -> Any:
    """``params:`` with the dataplane's build options written under ``knobs:`` added."""
    if not isinstance(raw, Mapping) or not isinstance(params, Mapping):
        return params
    build = {k: v for k, v in raw.items() if k in _build_names(dataplane)}
    for name in build:
        if name in params:
            raise ConfigError(f"campaign.knobs.{name}", build[name], "given once: it is in campaign.params too")
    return {**params, **build}


def _knobs(dataplane: str, raw: Any, backend: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``knobs:`` of a campaign: each system knob with its values (build options go to ``params``)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("campaign.knobs", raw, "a mapping of knob names to a value or a list of values")
    out = []
    for name, value in raw.items():
        if name in _build_names(dataplane):
            continue
        items = _list(f"campaign.knobs.{name}", value) if isinstance(value, list) else [value]
        try:
            values = tuple(knobs.check(str(name), v).value for v in items)
        except ConfigError as err:
            raise ConfigError(f"campaign.knobs.{name}", err.value, err.allowed) from None
        _unique(f"campaign.knobs.{name}", values)
        out.append((str(name), values))
    if out and backend != "xdp":
        raise ConfigError("campaign.knobs", out[0][0], "system knobs with generator backend xdp (the local testbed), "
                          f"not {backend}")
    return tuple(out)


def check_keys(where: str, raw: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a key of ``raw`` (the mapping at ``where``) that is not ``allowed``, naming it and its value."""
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


def _dataplane(name: str, value: Any, source: str) -> str:
    """A dataplane's name, or the path of a description file (``perfkit.describe``) relative to the
    campaign file, made absolute."""
    from perfkit.describe.schema import is_description
    if not isinstance(value, str) or not is_description(value):
        return _choice(name, value, dataplanes.names())
    path = ((Path(source).parent if source != "<string>" else Path.cwd()) / value).resolve()
    if not path.is_file():
        raise ConfigError(name, value, f"{', '.join(dataplanes.names())}, or a description file (relative to the "
                          f"campaign file: {path} does not exist)")
    dataplanes.get(str(path))  # its refusals now
    return str(path)


def _choice(name: str, value: Any, allowed: Any) -> Any:
    if not isinstance(value, Hashable) or value not in allowed:
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


def _frame_sizes(value: Any) -> tuple[int | str, ...]:
    """Frame sizes [bytes] and frame mixes (``imix``: ``perfkit.framemix``), as written."""
    if value is None:
        raise ConfigError("campaign.frame_sizes", value, f"a list of frame sizes, {framemix.allowed()}")
    items = _list("campaign.frame_sizes", value)
    out = []
    for i, v in enumerate(items):
        if isinstance(v, str) and v.strip().lower() not in framemix.MIXES:  # "128" is no size in YAML
            raise ConfigError(f"campaign.frame_sizes[{i}]", v, framemix.allowed())
        out.append(framemix.parse_frame_size(v, f"campaign.frame_sizes[{i}]"))
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


def _in_lab(generator: GeneratorSpec, lab: Any) -> GeneratorSpec:
    """The generator of a campaign run in the lab of inventory ``lab`` (None: as it is)."""
    if lab is None:
        return generator
    if not isinstance(lab, str) or not lab:
        raise ConfigError("campaign.lab", lab, "the path of an Ansible inventory (perfkit lab show -i it), or null")
    options = {"inventory": lab, **{k: v for k, v in generator.options.items() if k in LAB_OPTIONS}}
    return dataclasses.replace(generator, backend="lab", options=options, setup_seconds=SETUP_SECONDS["lab"],
                               trial_overhead_seconds=TRIAL_OVERHEAD_SECONDS["lab"])


def _dut_cores(value: Any, backend: str, cpus: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    local = backend in LOCAL_BACKENDS
    if value in ("auto", "auto+shared") and backend == "lab":
        return (1,), ()   # the lab generator's DUT agent runs the dataplane on one core for now
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
    raw = long_form("generator", raw)
    if not isinstance(raw, dict):
        raise ConfigError("campaign.generator", raw, "a backend name or a mapping with backend, options, jumbo_mtu ...")
    check_keys("campaign.generator", raw, GENERATOR_KEYS)
    backend = _choice("campaign.generator.backend", _default(raw, "backend", GENERATOR_DEFAULTS), BACKENDS)
    options = _default(raw, "options", GENERATOR_DEFAULTS) or {}
    if not isinstance(options, dict):
        raise ConfigError("campaign.generator.options", options, "a mapping of constructor options")
    if "mtu" in options:
        raise ConfigError("campaign.generator.options.mtu", options["mtu"],
                          "nothing here: the MTU is set per scenario (jumbo_mtu for frames above 1500 bytes)")
    _trex_profile(backend, options)
    setup = raw.get("setup_seconds", SETUP_SECONDS.get(backend, 5.0))
    overhead = raw.get("trial_overhead_seconds", TRIAL_OVERHEAD_SECONDS.get(backend, 0.5))
    jumbo = _default(raw, "jumbo_mtu", GENERATOR_DEFAULTS)
    return GeneratorSpec(backend=backend, options=dict(options),
                         jumbo_mtu=None if jumbo == "auto" else _int("campaign.generator.jumbo_mtu", jumbo, 1501, 65535),
                         setup_seconds=_number("campaign.generator.setup_seconds", setup),
                         trial_overhead_seconds=_number("campaign.generator.trial_overhead_seconds", overhead),
                         host_check_seconds=_host_check_seconds(_default(raw, "host_check_seconds", GENERATOR_DEFAULTS)))


def _host_check_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise ConfigError("campaign.generator.host_check_seconds", value, f"a number of seconds, 0 < x <= {MAX_SECONDS:g}")
    return float(value)


def _trex_profile(backend: str, options: dict[str, Any]) -> None:
    """``options.trex_profile`` (a TRex STL profile file as the traffic) and ``options.trex_tunables``."""
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
    items = _list("campaign.methods", raw)
    out: list[MethodSpec] = []
    for i, item in enumerate(items):
        where = f"campaign.methods[{i}]"
        item = long_form("methods[]", item)
        if not isinstance(item, dict):
            raise ConfigError(where, item, "a method name or a mapping with method, label, params")
        check_keys(where, item, METHOD_KEYS)
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
    raw = long_form("metrics", raw)
    if not isinstance(raw, dict):
        raise ConfigError("campaign.metrics", raw, "true, false or a mapping with enabled, start_local ...")
    check_keys("campaign.metrics", raw, METRICS_KEYS)
    strs = {}
    for key in ("stack_dir", "config", "prometheus_url", "pushgateway_url"):
        v = _default(raw, key, METRICS_DEFAULTS)
        strs[key] = None if v is None else _str(f"campaign.metrics.{key}", v)
    for key in ("prometheus_url", "pushgateway_url"):
        if strs[key] is not None:
            check_url(f"campaign.metrics.{key}", strs[key])
    return MetricsSpec(enabled=_bool("campaign.metrics.enabled", _default(raw, "enabled", METRICS_DEFAULTS)),
                       start_local=_bool("campaign.metrics.start_local", _default(raw, "start_local", METRICS_DEFAULTS)),
                       **strs)
