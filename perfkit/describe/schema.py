"""The dataplane description file (``mylb.dataplane.yaml``), read and checked into ``Description``.

Every key is checked here, before anything is built or loaded: a bad one is one ``ConfigError``
naming the key (``mylb.dataplane.yaml: traffic.verdict``), its value and what is allowed. What the
keys mean is in ``docs/descriptions.md``; paths are relative to the file's directory.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from perfkit.dataplane import Param
from perfkit.errors import ConfigError
from perfkit.yamlload import load_yaml

#: The suffixes that make a ``--dataplane`` argument a description file.
SUFFIXES = (".yaml", ".yml")
TOP_KEYS = ("name", "title", "program", "attach", "params", "variant", "config", "counters", "traffic", "model")
PROGRAM_KEYS = ("object", "build", "sources", "name", "defines")
ATTACH_MODES = ("perfkit",)
ATTACH_KEYS = ("setup", "teardown")
CONFIG_KEYS = ("globals", "maps", "python", "command")
COUNTER_KEYS = ("map", "names", "packets", "bytes", "forward", "drop")
TRAFFIC_KEYS = ("profile", "tunables", "frame_size", "flows", "ingress", "verdict", "socket", "encaps")
PARAM_KEYS = ("default", "help", "kind", "choices", "minimum", "maximum")
VERDICTS = ("XDP_REDIRECT", "XDP_TX", "XDP_PASS", "XDP_DROP")
KINDS = {"int": int, "str": str, "bool": bool}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DEFINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOOK = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class ProgramSpec:
    """``program``: the object, how it is built, its XDP program and build options."""

    object: Path | None
    """The object file (absolute; made by ``build`` when there is one); None: none (the NF's own
    loader, ``attach.setup``, loads its program)."""
    name: str
    """The XDP program's name in the object."""
    build: str = ""
    """A shell command run in the description's directory that makes ``object`` ("": the object exists)."""
    sources: tuple[Path, ...] = ()
    """What the build's cache key hashes (files or directories; default: the description's directory)."""
    defines: tuple[tuple[str, Param], ...] = ()
    """(macro, its scenario parameter) per build option, passed to ``build`` as ``-DMACRO=value``."""


@dataclass(frozen=True)
class AttachSpec:
    """``attach``: ``perfkit`` (perfkit attaches the program on the port traffic enters), or the NF's
    own ``setup``/``teardown`` commands, run in the DUT's namespace."""

    setup: str = ""
    teardown: str = ""

    @property
    def by_nf(self) -> bool:
        return bool(self.setup)


@dataclass(frozen=True)
class Entry:
    """One map entry as written: key and value (mappings by field name, scalars, lists)."""

    key: Any
    value: Any


@dataclass(frozen=True)
class ConfigSpec:
    """``config``: what is written through BTF, and the hooks for what is too large to write so."""

    globals: Mapping[str, Any] = field(default_factory=dict)
    maps: Mapping[str, tuple[Entry, ...]] = field(default_factory=dict)
    python: str = ""
    """``module:function`` called with the loaded object and the scenario (``perfkit.describe.hooks``)."""
    command: str = ""
    """A shell command run after the configuration, with ``{map_id[NAME]}`` substituted."""


@dataclass(frozen=True)
class CountersSpec:
    """``counters``: the array (or per-CPU array) that holds them, one entry per counter."""

    map: str
    names: tuple[str, ...] | str = ()
    """Index names in index order, or ``enum NAME`` (a BTF enum); (): the map key's enum."""
    packets: str = "packets"
    """The value's field of packets ("": the value is the packet count)."""
    bytes: str = ""
    """The value's field of bytes ("": none)."""
    forward: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrafficSpec:
    """``traffic``: the TRex STL profile and what its packets should get."""

    profile: Path
    tunables: tuple[Param, ...] = ()
    frame_size: str = ""
    """The tunable that gets the scenario's frame size ("": none)."""
    flows: str = ""
    """The tunable that gets the scenario's flow count ("": none)."""
    ingress: str = "a"
    verdict: str = "XDP_REDIRECT"
    socket: tuple[str, int] | None = None
    """XDP_PASS: the DUT's UDP socket the kernel delivers the traffic to (None: the kernel's counters)."""
    encaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Description:
    """A checked description file."""

    path: Path
    name: str
    title: str
    program: ProgramSpec
    attach: AttachSpec
    config: ConfigSpec
    counters: CountersSpec | None
    traffic: TrafficSpec
    params: tuple[Param, ...] = ()
    """The file's own parameters (``params``), substituted into the configuration as ``{name}``."""
    variant: str = ""
    model: str = ""

    @property
    def dir(self) -> Path:
        return self.path.parent

    def all_params(self) -> tuple[Param, ...]:
        """Every scenario parameter: the file's, the build options, the profile's tunables."""
        return self.params + tuple(p for _, p in self.program.defines) + self.traffic.tunables


def is_description(name: str) -> bool:
    """Whether a ``--dataplane`` argument names a description file rather than a registered dataplane."""
    return str(name).lower().endswith(SUFFIXES) or "/" in str(name)


def read(path: str | Path) -> Description:
    """The description at ``path``, checked."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ConfigError("dataplane", str(path), "a dataplane name or the path of a description file (.yaml)")
    raw = load_yaml(p.read_text(), str(p))
    return parse(raw, p)


def parse(raw: Any, path: Path) -> Description:
    where = path.name
    if not isinstance(raw, Mapping):
        raise ConfigError(where, type(raw).__name__, "a mapping of keys: " + ", ".join(TOP_KEYS))
    _keys(where, raw, TOP_KEYS)
    for key in ("program", "traffic"):
        if key not in raw:
            raise ConfigError(f"{where}: {key}", None, f"a mapping (keys: {', '.join(PROGRAM_KEYS if key == 'program' else TRAFFIC_KEYS)})")
    stem = path.name.split(".")[0]
    name = _str(f"{where}: name", raw.get("name", re.sub(r"[^a-z0-9_]", "_", stem.lower())))
    if not _NAME.match(name):
        raise ConfigError(f"{where}: name", name, "a lower-case identifier (letters, digits, _)")
    params = _params(f"{where}: params", raw.get("params") or {})
    program = _program(f"{where}: program", raw["program"], path.parent)
    traffic = _traffic(f"{where}: traffic", raw["traffic"], path.parent)
    desc = Description(
        path=path, name=name, title=_str(f"{where}: title", raw.get("title", name)), program=program,
        attach=_attach(f"{where}: attach", raw.get("attach", "perfkit")),
        config=_config(f"{where}: config", raw.get("config") or {}),
        counters=_counters(f"{where}: counters", raw["counters"]) if raw.get("counters") is not None else None,
        traffic=traffic, params=params, variant=_str(f"{where}: variant", raw.get("variant", "")),
        model=_hook(f"{where}: model", raw.get("model", "")))
    names = [p.name for p in desc.all_params()]
    for n in names:
        if names.count(n) > 1:
            raise ConfigError(f"{where}: params", n, "each parameter once (params, program.defines and "
                              "traffic.tunables share one name space)")
    if desc.variant and desc.variant not in names:
        raise ConfigError(f"{where}: variant", desc.variant, names or "none (no parameters)")
    if desc.program.object is None and not desc.attach.by_nf:
        raise ConfigError(f"{where}: program.object", None, "the object file (.o): perfkit loads it (attach: perfkit)")
    if desc.attach.by_nf and desc.config.globals:
        raise ConfigError(f"{where}: config.globals", sorted(desc.config.globals),
                          "none with attach.setup (the NF's loader set its globals before it loaded it)")
    return desc


# -- sections -----------------------------------------------------------------------------------
def _program(where: str, raw: Any, base: Path) -> ProgramSpec:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "a mapping with keys " + ", ".join(PROGRAM_KEYS))
    _keys(where, raw, PROGRAM_KEYS)
    if "name" not in raw:
        raise ConfigError(f"{where}.name", None, "the XDP program's name in the object (its C function)")
    build = _str(f"{where}.build", raw.get("build", ""))
    if "object" not in raw:
        if build:
            raise ConfigError(f"{where}.object", None, "the object file (.o) program.build makes")
        return ProgramSpec(object=None, name=_str(f"{where}.name", raw["name"]))
    obj = base / _str(f"{where}.object", raw["object"])
    if not build and not obj.is_file():
        raise ConfigError(f"{where}.object", str(raw["object"]), "an existing object file (or a program.build that makes it)")
    sources = raw.get("sources", [])
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ConfigError(f"{where}.sources", sources, "a list of files or directories")
    for s in sources:
        if not (base / s).exists():
            raise ConfigError(f"{where}.sources", s, "existing files or directories (relative to the description)")
    defines_raw = raw.get("defines") or {}
    if not isinstance(defines_raw, Mapping):
        raise ConfigError(f"{where}.defines", defines_raw, "a mapping MACRO: default (or MACRO: {default: ...})")
    if defines_raw and not build:
        raise ConfigError(f"{where}.defines", sorted(defines_raw), "none without program.build (nothing to pass -D to)")
    defines = []
    for macro, spec in defines_raw.items():
        if not isinstance(macro, str) or not _DEFINE.match(macro):
            raise ConfigError(f"{where}.defines", macro, "C macro names")
        defines.append((macro, _param(f"{where}.defines.{macro}", macro.lower(), spec, build=True)))
    return ProgramSpec(object=obj, name=_str(f"{where}.name", raw["name"]), build=build,
                       sources=tuple(base / s for s in sources), defines=tuple(defines))


def _attach(where: str, raw: Any) -> AttachSpec:
    if raw in ATTACH_MODES:
        return AttachSpec()
    if not isinstance(raw, Mapping) or "setup" not in raw:
        raise ConfigError(where, raw, "perfkit, or a mapping with setup (and teardown) commands")
    _keys(where, raw, ATTACH_KEYS)
    return AttachSpec(setup=_str(f"{where}.setup", raw["setup"]), teardown=_str(f"{where}.teardown", raw.get("teardown", "")))


def _config(where: str, raw: Any) -> ConfigSpec:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "a mapping with keys " + ", ".join(CONFIG_KEYS))
    _keys(where, raw, CONFIG_KEYS)
    glob = raw.get("globals") or {}
    if not isinstance(glob, Mapping):
        raise ConfigError(f"{where}.globals", glob, "a mapping NAME: value (globals of .rodata, .data, .bss)")
    maps_raw = raw.get("maps") or {}
    if not isinstance(maps_raw, Mapping):
        raise ConfigError(f"{where}.maps", maps_raw, "a mapping MAP: list of {key: ..., value: ...}")
    maps = {}
    for m, entries in maps_raw.items():
        if not isinstance(entries, list):
            raise ConfigError(f"{where}.maps.{m}", entries, "a list of {key: ..., value: ...}")
        out = []
        for i, e in enumerate(entries):
            if not isinstance(e, Mapping) or set(e) != {"key", "value"}:
                raise ConfigError(f"{where}.maps.{m}[{i}]", e, "a mapping with exactly key and value")
            out.append(Entry(e["key"], e["value"]))
        maps[str(m)] = tuple(out)
    return ConfigSpec(globals=dict(glob), maps=maps, python=_hook(f"{where}.python", raw.get("python", "")),
                      command=_str(f"{where}.command", raw.get("command", "")))


def _counters(where: str, raw: Any) -> CountersSpec:
    if not isinstance(raw, Mapping) or "map" not in raw:
        raise ConfigError(where, raw, "a mapping with map (and " + ", ".join(COUNTER_KEYS[1:]) + ")")
    _keys(where, raw, COUNTER_KEYS)
    names = raw.get("names") or ()
    if names == ():
        pass
    elif isinstance(names, str):
        if not names.startswith("enum "):
            raise ConfigError(f"{where}.names", names, "enum NAME (a BTF enum), or a list of names in index order")
    elif isinstance(names, list) and all(isinstance(n, str) for n in names):
        names = tuple(names)
    else:
        raise ConfigError(f"{where}.names", names, "enum NAME (a BTF enum), or a list of names in index order")
    return CountersSpec(map=_str(f"{where}.map", raw["map"]), names=names,
                        packets=_str(f"{where}.packets", raw.get("packets", "packets") or ""),
                        bytes=_str(f"{where}.bytes", raw.get("bytes", "") or ""),
                        forward=_strs(f"{where}.forward", raw.get("forward", [])),
                        drop=_strs(f"{where}.drop", raw.get("drop", [])))


def _traffic(where: str, raw: Any, base: Path) -> TrafficSpec:
    if not isinstance(raw, Mapping) or "profile" not in raw:
        raise ConfigError(where, raw, "a mapping with profile (a TRex STL profile) and " + ", ".join(TRAFFIC_KEYS[1:]))
    _keys(where, raw, TRAFFIC_KEYS)
    profile = base / _str(f"{where}.profile", raw["profile"])
    if not profile.is_file() or profile.suffix != ".py":
        raise ConfigError(f"{where}.profile", raw["profile"], "an existing TRex STL profile (.py)")
    tunables = _params(f"{where}.tunables", raw.get("tunables") or {})
    names = [t.name for t in tunables]
    for key in ("frame_size", "flows"):
        if raw.get(key) and raw[key] not in names:
            raise ConfigError(f"{where}.{key}", raw[key], f"a tunable of traffic.tunables: {', '.join(names) or 'none'}")
    tunables = tuple(t for t in tunables if t.name not in (raw.get("frame_size"), raw.get("flows")))
    verdict = raw.get("verdict", "XDP_REDIRECT")
    if verdict not in VERDICTS:
        raise ConfigError(f"{where}.verdict", verdict, VERDICTS)
    ingress = raw.get("ingress", "a")
    if ingress not in ("a", "b"):
        raise ConfigError(f"{where}.ingress", ingress, ("a", "b"))
    socket = None
    if raw.get("socket") is not None:
        addr, _, port = str(raw["socket"]).rpartition(":")
        if verdict != "XDP_PASS" or not addr or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where}.socket", raw["socket"], "ADDRESS:UDP_PORT of a socket on the DUT, with verdict XDP_PASS")
        socket = (addr, int(port))
    return TrafficSpec(profile=profile, tunables=tunables, frame_size=str(raw.get("frame_size") or ""),
                       flows=str(raw.get("flows") or ""), ingress=ingress, verdict=verdict, socket=socket,
                       encaps=_strs(f"{where}.encaps", raw.get("encaps", [])))


# -- parameters -----------------------------------------------------------------------------------
def _params(where: str, raw: Any) -> tuple[Param, ...]:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "a mapping NAME: default (or NAME: {default, help, kind, choices, minimum, maximum})")
    out = []
    for name, spec in raw.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(where, name, "lower-case identifiers (letters, digits, _)")
        out.append(_param(f"{where}.{name}", name, spec))
    return tuple(out)


def _param(where: str, name: str, spec: Any, build: bool = False) -> Param:
    """One parameter: a default (its kind inferred), or a mapping of ``PARAM_KEYS``."""
    if not isinstance(spec, Mapping):
        spec = {"default": spec}
    _keys(where, spec, PARAM_KEYS)
    if "default" not in spec:
        raise ConfigError(f"{where}.default", None, "a default value")
    default = spec["default"]
    kind_name = spec.get("kind", "bool" if isinstance(default, bool) else "int" if isinstance(default, int) else "str")
    if kind_name not in KINDS:
        raise ConfigError(f"{where}.kind", kind_name, KINDS)
    choices = spec.get("choices")
    if choices is not None and (not isinstance(choices, list) or not choices):
        raise ConfigError(f"{where}.choices", choices, "a non-empty list")
    for key in ("minimum", "maximum"):
        if spec.get(key) is not None and (isinstance(spec[key], bool) or not isinstance(spec[key], int)):
            raise ConfigError(f"{where}.{key}", spec[key], "an integer")
    p = Param(name, default, _str(f"{where}.help", spec.get("help", name)), tuple(choices) if choices else None,
              KINDS[kind_name], spec.get("minimum"), spec.get("maximum"), build)
    return Param(name, p.parse_named(f"{where}.default", default), p.help, p.choices, p.kind, p.minimum, p.maximum, build)


# -- helpers --------------------------------------------------------------------------------------
def _keys(where: str, raw: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}" if not where.endswith(".yaml") else f"{where}: {key}", raw[key],
                              f"no such key; keys: {', '.join(allowed)}")


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(where, value, "a string")
    return value


def _strs(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(where, value, "a list of names")
    return tuple(value)


def _hook(where: str, value: Any) -> str:
    if value in ("", None):
        return ""
    if not isinstance(value, str) or not _HOOK.match(value):
        raise ConfigError(where, value, "module:function (the module importable from the description's directory)")
    return value
