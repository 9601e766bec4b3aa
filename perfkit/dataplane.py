"""The seam between perfkit and a network function: the ``Dataplane`` interface.

Everything perfkit measures with (testbed, generators, searches, campaigns, prog-bench, metrics,
analysis, report, CLI) knows a dataplane only through this module. A dataplane is a ``Dataplane``
subclass (or an instance of one) registered in the entry-point group ``perfkit.dataplanes`` by any
installed package, perfkit's own three included; ``perfkit.dataplanes.get(name)`` finds it. This
module is a public, versioned interface (``API_VERSION``; docs/dataplane-api.md): it imports nothing
from the testbed.

The required core is traffic (``Traffic.packet``, ``Traffic.field_engine``), ``Dataplane.load`` and
the loaded program's counters. The reference model (``Dataplane.emit``, ``Dataplane.check_output``,
``Traffic.expected_output``), prog-bench support (``Dataplane.bench_spec``) and other port
addresses (``Traffic.on_ports``) are optional: they raise ``NotProvided``, and generic code asks
``Dataplane.has_model`` / ``has_bench`` first and says what is missing.

The parts:

- ``Param``: a scenario parameter of the dataplane (PGW-U: direction, sessions ...; L4 LB:
  protocol, VIPs, reals), validated by the dataplane with errors naming the field;
- ``Traffic``: the frames a scenario offers (template per flow, field engine, expected output);
- ``DutProgram``: the dataplane loaded and configured for a traffic profile (its XDP entry program,
  counters, and the check of what it emitted);
- ``BpfControl`` and ``BpfDut``: what every dataplane's control plane and DUT wrapper do alike (load
  ``bpf/<name>.bpf.c``, configure it, read its counters); each dataplane subclasses them with what
  it alone has;
- ``BenchSpec``: what prog-bench needs to drive the program through its intended path;
- ``CounterSpec`` and ``CounterCell``: the counters the dataplane exports to Prometheus
  (``Dataplane.counter_specs``: their names, help and labels; ``DutProgram.counter_cells``: where
  each series lives in the loaded program's maps; ``perfkit exporter`` serves them).
"""
from __future__ import annotations

import enum
import math
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Self

from perfkit.encap import BY_DADDR, Encap, Steering
from perfkit.errors import ConfigError, PerfkitError
from perfkit.layouts import Struct
from perfkit.libbpf import BPF_XDP_CPUMAP, BpfObject, Map, Program
from perfkit.provenance import object_hashes
from perfkit.stl.fieldengine import FieldEngine
from perfkit.ports import PORT_MACS
from perfkit.units import FCS_LEN

if TYPE_CHECKING:
    import numpy as np

#: The version of this interface. A plugin's ``Dataplane`` subclass sets ``api_version`` to the
#: version it was written for; discovery (``perfkit.dataplanes``) refuses any other, in one line.
#: It changes only when a change would break a plugin written for the previous one
#: (docs/dataplane-api.md, "Versioning").
API_VERSION = 2


#: The note a trial carries when its dataplane has no reference model.
NO_MODEL_NOTE = "output not checked: no model (the dataplane has no reference model)"


class NotProvided(ConfigError):
    """An optional part of the interface that a dataplane does not provide (its reference model,
    prog-bench support ...): ``dataplane mylb: no reference model (emit)``."""

    def __init__(self, what: str, dataplane: str):
        self.what = what
        self.dataplane = dataplane
        PerfkitError.__init__(self, f"dataplane {dataplane}: {what}")
        self.field, self.value, self.allowed = f"dataplane {dataplane}", what, "a dataplane that provides it"


#: The XDP verdicts a traffic's packets may get (``Traffic.verdict``).
VERDICTS = ("XDP_REDIRECT", "XDP_TX", "XDP_PASS", "XDP_DROP")


@dataclass(frozen=True)
class Emitted:
    """A reference model's answer for one frame."""

    verdict: str
    """XDP_PASS, XDP_DROP, XDP_REDIRECT or XDP_TX."""
    stat: str
    """The counter it goes to (a forwarding counter, a drop reason ...)."""
    out: bytes | None = None
    """The emitted frame, for forwarding verdicts."""


@dataclass(frozen=True)
class Param:
    """One scenario parameter of a dataplane: a CLI option ``--<name>``, a campaign ``params`` key,
    a column of the trial frame and a Prometheus label."""

    name: str
    """Lower-case identifier (``direction``); the CLI spells it ``--direction``."""
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    """The allowed values, or None for any value of ``kind`` within ``minimum``/``maximum``."""
    kind: type = str
    """str, int or bool."""
    minimum: int | None = None
    maximum: int | None = None
    build: bool = False
    """A build option: compiled into the program (``-D``), not configured at run time. Like every
    parameter a campaign axis; ``--knob NAME=VALUE`` sets it too."""

    def parse(self, value: Any) -> Any:
        """``value`` (as written: YAML, CLI text or Python) as ``kind``; ConfigError names the field."""
        allowed = self.allowed()
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "on", "yes"):
                return True
            if text in ("0", "false", "off", "no"):
                return False
            raise ConfigError(self.name, value, allowed)
        if self.kind is int:
            if isinstance(value, bool):
                raise ConfigError(self.name, value, allowed)
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ConfigError(self.name, value, allowed) from None
            if not math.isfinite(number) or number != int(number):
                raise ConfigError(self.name, value, allowed)
            out: Any = int(number)
        else:
            out = str(value)
        if self.choices is not None and out not in self.choices:
            raise ConfigError(self.name, value, allowed)
        if (self.minimum is not None and out < self.minimum) or (self.maximum is not None and out > self.maximum):
            raise ConfigError(self.name, value, allowed)
        return out

    def parse_named(self, where: str, value: Any) -> Any:
        """``parse``, with errors naming ``where`` (``campaign.params.direction[1]``) as the field."""
        try:
            return self.parse(value)
        except ConfigError as err:
            raise ConfigError(where, err.value, err.allowed) from None

    def allowed(self) -> str:
        if self.choices is not None:
            return ", ".join(str(c) for c in self.choices)
        if self.kind is bool:
            return "on or off"
        if self.kind is int:
            lo = "" if self.minimum is None else f"{self.minimum} <= "
            hi = "" if self.maximum is None else f" <= {self.maximum}"
            return f"an integer {lo}n{hi}".replace("integer n", "integer")
        return "a string"


@dataclass(frozen=True)
class PortMacs:
    """The MAC addresses of a measurement's four ports: the DUT's ``a`` and ``b``, and the tester's
    ``p0`` (cabled to ``a``) and ``p1`` (cabled to ``b``). The defaults are the local testbed's; a lab
    gives its inventory's, so that real NICs accept the frames without promiscuous mode."""

    a: str = PORT_MACS["a"]
    b: str = PORT_MACS["b"]
    p0: str = PORT_MACS["p0"]
    p1: str = PORT_MACS["p1"]

    def into(self, port: str) -> tuple[str, str]:
        """(source, destination) of a frame the tester sends into the DUT's ``port`` (``a`` or ``b``)."""
        return (self.p0, self.a) if port == "a" else (self.p1, self.b)

    def out_of(self, port: str) -> tuple[str, str]:
        """(source, destination) of a frame the DUT sends out of its ``port`` to the tester."""
        return (self.a, self.p0) if port == "a" else (self.b, self.p1)


class Traffic(ABC):
    """The traffic of one scenario: what the generator offers, and what the DUT must emit.

    Frames are built without FCS; sizes that include it say so.
    """

    frame_size: int
    """The scenario's frame size [bytes], FCS included (the dataplane says which frame it means)."""
    flows: int
    """Distinct flows the field engine walks (flow i is ``packet(i)``)."""
    ingress: str = "a"
    """The DUT port the offered frames enter: ``a`` (tester port p0 sends, p1 receives) or ``b``."""
    verdict: str = "XDP_REDIRECT"
    """The verdict the traffic's packets should get (``VERDICTS``): XDP_REDIRECT (out of the other
    port), XDP_TX (back out of the ingress port), XDP_PASS (to the DUT's kernel: a socket if
    ``to_socket``, else the kernel's counters) or XDP_DROP (measured as a drop rate: a packet is
    received when the DUT's forwarding counters, ``Dataplane.forwarding``, count it)."""

    @abstractmethod
    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The frame offered for ``flow`` with a signature (``perfkit.stl.signature.SIGNATURE``)."""

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct DUT emits for ``packet(flow, ...)`` (the reference model's answer).
        Optional: part of the model (``NotProvided`` without one)."""
        raise NotProvided("no reference model (Traffic.expected_output)", type(self).__name__)

    @abstractmethod
    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """How the generator turns ``packet(0)`` into ``packet(i)`` for every flow i."""

    def on_ports(self, macs: PortMacs) -> Self:
        """The same traffic between ports with the MAC addresses ``macs`` (a lab's inventory's):
        offered frames addressed to the DUT's ingress port, the DUT configured to address the tester.
        Optional: only a lab with other addresses than the local testbed's needs it."""
        if macs == PortMacs():
            return self
        raise NotProvided("no traffic for other port addresses (Traffic.on_ports)", type(self).__name__)

    @property
    def to_socket(self) -> tuple[str, int] | None:
        """Where the DUT's kernel delivers this traffic, when the dataplane passes it there (XDP_PASS):
        the address and UDP port of a socket on the DUT (``perfkit.testbed.socksink``). None: it comes
        out of the DUT's egress port, to the sink."""
        return None

    @property
    def egress(self) -> str | None:
        """The DUT port the traffic's frames leave by (``b``/``a``), or None when they leave by none
        (XDP_PASS, XDP_DROP)."""
        if self.to_socket:
            return None
        if self.verdict == "XDP_REDIRECT":
            return "b" if self.ingress == "a" else "a"
        return self.ingress if self.verdict == "XDP_TX" else None

    @property
    def wire_frame_size(self) -> int:
        """Bytes per offered frame, FCS included."""
        return len(self.packet(0)) + FCS_LEN

    @property
    def output_frame_size(self) -> int:
        """Bytes per frame the DUT should emit, FCS included (without a model: as offered)."""
        try:
            return len(self.expected_output(0)) + FCS_LEN
        except NotProvided:
            return self.wire_frame_size


@dataclass(frozen=True)
class CounterSpec:
    """A counter a dataplane exports to Prometheus (``perfkit exporter``): one metric family."""

    name: str
    """The metric's name, per Prometheus' naming guide: ``perfkit_<dataplane>_..._total`` in base
    units (``perfkit_<dataplane>_packets_total``, ``perfkit_<dataplane>_bytes_total``)."""
    help: str
    labels: tuple[str, ...]
    """Its label names (``("vip",)``)."""
    unit: str
    """packets or bytes."""


@dataclass(frozen=True)
class CounterCell:
    """Where one series of a ``CounterSpec`` lives in the loaded program: the 64-bit word at byte
    ``offset`` of entry ``index`` of the array map ``map``, summed over CPUs for a per-CPU map."""

    metric: str
    """The ``CounterSpec.name`` it belongs to."""
    labels: tuple[str, ...]
    """Its label values, in the order of the spec's ``labels``."""
    map: str
    """The map's name in the program's object."""
    index: int
    offset: int
    """[bytes] into the entry's value."""


class DutProgram(ABC):
    """A dataplane loaded into the kernel and configured for one traffic profile."""

    attached_by_nf: bool = False
    """True when the NF's own loader (a ``setup`` command, run in the DUT's namespace) attached the
    program: the testbed then neither attaches nor detaches it, ``program`` is the program found
    attached (for the kernel's BPF statistics) and ``close`` runs the NF's teardown."""

    @property
    @abstractmethod
    def program(self) -> Program:
        """The XDP program to attach to the DUT ports (or to run in a cpumap)."""

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """Packets per dataplane counter since load (summed over CPUs)."""

    def counters_per_cpu(self) -> dict[int, dict[str, int]]:
        """Packets per dataplane counter since load, by the CPU that counted them ({}: not kept)."""
        return {}

    def tables(self) -> dict[str, float]:
        """What the DUT's tables hold, read back from the kernel after they were filled (PGW-U:
        sessions installed and present, and their ratio); {}: nothing to say."""
        return {}

    def counter_cells(self) -> list[CounterCell]:
        """Where every series of the dataplane's ``counter_specs`` lives in this program's maps
        ([]: nothing exported)."""
        return []

    def map_ids(self) -> dict[str, int]:
        """Kernel ids of the maps ``counter_cells`` name (a process that did not load the program, or
        in another network namespace, opens them by id)."""
        return {}

    def object_hashes(self) -> dict[str, str]:
        """sha256 (hex) of each BPF object file loaded, by path (``perfkit.provenance.object_hashes``;
        a trial records them: field ``objects``); {}: not known."""
        return {}

    def close(self) -> None:
        """Release the kernel objects (idempotent)."""


#: The key of a one-entry array map.
KEY0 = struct.pack("=I", 0)


@dataclass
class BpfControl:
    """The control plane of a dataplane's XDP program, loaded: the object ``object_file``, its entry
    program ``entry``, its configuration (the one entry of the array map ``config_map``) and its
    counters (the per-CPU array ``stats_map``, one record per counter). Each is declared as data by
    the subclass; none is derived from a name.

    A dataplane's control is a dataclass subclass that sets the class attributes and ``config``'s
    default, and adds what it alone has (sessions, VIPs); its ``load`` is
    ``cls(cls.open(...), ...).start()``."""

    name: ClassVar[str] = "abstract"
    """For messages: the program's name."""
    object_file: ClassVar[Path | Callable[[], Path] | None] = None
    """The object to load: a path, or a function that gives it (building it first if it must)."""
    entry: ClassVar[str] = ""
    """The XDP program's name in the object."""
    config_map: ClassVar[str | None] = None
    """The one-entry array map ``configure`` writes ``config.to_struct()`` to (None: none)."""
    stats_map: ClassVar[str] = ""
    """The per-CPU array of counter records (``stat_rec``), indexed by ``stat``."""
    metric_prefix: ClassVar[str] = ""
    """The Prometheus prefix of its counters (``perfkit_<name>_``)."""
    stat: ClassVar[type[enum.IntEnum]]
    """``enum <name>_stat``: a counter per member (named by its ``label``) but the last, the count."""
    stat_rec: ClassVar[type[Struct]]
    """``struct <name>_stat_rec``: one counter's record (packets, bytes ...)."""

    obj: BpfObject
    config: Any
    """The configuration written (a dataclass whose ``to_struct()`` is ``struct <name>_config``)."""

    @classmethod
    def open(cls, path: Path | str | None = None, cpumap: bool = False, max_entries: dict[str, int] | None = None,
             rodata: Struct | None = None) -> BpfObject:
        """``object_file`` (or ``path``) loaded into the kernel, with map sizes and constants set;
        ``cpumap``: its entry program made to run in a cpumap (several DUT cores)."""
        return BpfObject(Path(path) if path else cls.object_path(), max_entries=max_entries, rodata=rodata,
                         attach_types={cls.entry: BPF_XDP_CPUMAP} if cpumap else None)

    @classmethod
    def object_path(cls) -> Path:
        """``object_file``, as a path (a function is called)."""
        if cls.object_file is None:
            raise NotProvided("no object file (BpfControl.object_file)", cls.name)
        return Path(cls.object_file() if callable(cls.object_file) else cls.object_file)

    def start(self) -> Self:
        """Write ``config`` (on a new object: the default); the object is closed when that fails."""
        try:
            self.configure(self.config)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def program(self) -> Program:
        return self.obj.program(self.entry)

    def map(self, name: str) -> Map:
        return self.obj.map(name)

    def configure(self, config: Any) -> None:
        if self.config_map is not None:
            self.map(self.config_map).update(KEY0, config.to_struct())
        self.config = config

    def summed(self, map_name: str, index: int) -> Struct:
        """Entry ``index`` of the per-CPU array ``map_name`` (of ``stat_rec``), each field summed over CPUs."""
        recs = self.per_cpu(map_name, index)
        out = self.stat_rec()
        for fname, *_ in self.stat_rec._fields_:
            setattr(out, fname, sum(getattr(r, fname) for r in recs) & (1 << 64) - 1)
        return out

    def per_cpu(self, map_name: str, index: int) -> list[Struct]:
        """Entry ``index`` of the per-CPU array ``map_name`` (of ``stat_rec``), one record per CPU."""
        m = self.map(map_name)
        return [self.stat_rec.from_bytes(v) for v in m.percpu_values(m.lookup(struct.pack("=I", index)) or b"")]

    def stats(self) -> dict[str, Struct]:
        """What happened to packets so far: each counter's record by label, summed over CPUs."""
        return {s.label: self.summed(self.stats_map, int(s)) for s in list(self.stat)[:-1]}  # type: ignore[attr-defined]

    @classmethod
    def prefix(cls) -> str:
        """``metric_prefix``, or ``perfkit_<name>_``."""
        return cls.metric_prefix or f"perfkit_{cls.name}_"

    def object_hashes(self) -> dict[str, str]:
        return object_hashes([self.obj])

    def close(self) -> None:
        self.obj.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BpfDut(DutProgram):
    """A dataplane's ``BpfControl`` set up for one traffic profile: loaded, configured with ``config``
    and filled (``fill``: sessions, VIPs ...); closed again if any of that fails.

    A dataplane's DUT subclasses it: its ``__init__(traffic, ifindex_a, ifindex_b, cpumap)`` works out
    the configuration for the ports and calls ``super().__init__`` with the control it loaded."""

    def __init__(self, control: BpfControl, config: Any, traffic: Traffic):
        self.control = control
        #: What the DUT was set up to do: the reference for checking what it emits.
        self.config = config
        self.traffic = traffic
        try:
            control.configure(config)
            self.fill()
        except BaseException:
            control.close()
            raise

    def fill(self) -> None:
        """Install the tables the traffic needs (after the configuration)."""

    def counter_cells(self) -> list[CounterCell]:
        """Every counter of ``stats_map``, packets and bytes, by its label (``outcome``); a
        dataplane's DUT adds its own (per VIP, per real ...)."""
        prefix, rec, stats = self.control.prefix(), self.control.stat_rec, self.control.stats_map
        out = []
        for s in list(self.control.stat)[:-1]:  # type: ignore[attr-defined]
            for unit in ("packets", "bytes"):
                out.append(CounterCell(f"{prefix}{unit}_total", (s.label,), stats, int(s),
                                       getattr(rec, unit).offset))
        return out

    def map_ids(self) -> dict[str, int]:
        return {m: self.control.map(m).id for m in sorted({c.map for c in self.counter_cells()})}

    @property
    def program(self) -> Program:
        return self.control.program

    def object_hashes(self) -> dict[str, str]:
        return self.control.object_hashes()

    def counters(self) -> dict[str, int]:
        return {k: v.packets for k, v in self.control.stats().items()}

    def counters_per_cpu(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for s in list(self.control.stat)[:-1]:  # type: ignore[attr-defined]
            for cpu, rec in enumerate(self.control.per_cpu(self.control.stats_map, int(s))):
                out.setdefault(cpu, {})[s.label] = rec.packets
        return out

    def close(self) -> None:
        self.control.close()


@dataclass(frozen=True)
class BenchSpec:
    """What ``perfkit prog-bench`` needs to keep a dataplane program on its intended path.

    Before every run the harness restores ``frame`` and writes the next key of ``keys`` (in order,
    wrapping): key bytes ``[key_off, key_off + size)`` go to frame offset ``offset`` for each
    ``(offset, size, key_off)`` of ``fields``.
    """

    frame: bytes
    fields: tuple[tuple[int, int, int], ...]
    keys: np.ndarray
    """A (n, key_size) uint8 array; one row per run, in order. Empty: the template as it is."""
    path_counter: str
    """The counter every measured run must raise, and the only one."""
    expected: Emitted
    """The reference model's answer for ``frame`` (checked once before measuring)."""
    description: dict[str, Any] = field(default_factory=dict)
    """Scenario facts for the result (``sessions``, ``vips`` ...)."""


class Dataplane(ABC):
    """One network function perfkit can measure. Subclasses set the class attributes."""

    name: str = "abstract"
    """Registry name (its entry point's name) and the campaign's ``dataplane``: only that."""
    title: str = "abstract"
    """For people: ``PGW-U``, ``L4 load balancer``."""
    api_version: int = 0
    """The ``API_VERSION`` the dataplane was written for; discovery refuses any other."""
    ports: tuple[str, ...] = ("a", "b")
    """The DUT port names the dataplane uses (``Traffic.ingress`` is one of them)."""
    metric_prefix: str = ""
    """The Prometheus prefix of its counters; empty: ``perfkit_<name>_``."""
    params: tuple[Param, ...] = ()
    """The scenario parameters, in the order keys and grids use them."""
    variant: str = ""
    """The parameter that is the main categorical axis of plots and tables (PGW-U: direction)."""
    variant_labels: Mapping[str, str] = {}
    """How plots name the variant's values (a direction ``ul`` -> ``UL (decap)``)."""
    forward_counters: frozenset[str] = frozenset()
    """Counters of packets forwarded to the tester; every other counter that rises is a DUT drop."""
    steering: Steering = BY_DADDR
    """How ``bpf/steer.bpf.c`` spreads packets over several DUT cores (``perfkit.encap``)."""
    encaps: tuple[Encap, ...] = ()
    """The tunnels its frames carry, in or out (the sink finds the signature through them)."""
    frame_size_doc: str = "frame size [bytes], FCS included"
    """What ``frame_size`` means for this dataplane (which frame)."""
    layouts: Mapping[str, type[Struct]] = {}
    """The ctypes mirrors of its object's structs, by C name (``perfkit dataplane check`` compares
    each with the object's BTF); empty: nothing to check."""

    # -- parameters ------------------------------------------------------------------------------
    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ConfigError(f"{self.name} parameter", name, [p.name for p in self.params])

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter, defaults filled in, parsed and checked; unknown names are refused."""
        known = {p.name for p in self.params}
        for name in params:
            if name not in known:
                raise ConfigError(f"{self.name} parameter", name, sorted(known) or "none")
        out = {p.name: p.parse(params[p.name]) if params.get(p.name) is not None else p.default for p in self.params}
        self.check(out)
        return out

    def check(self, params: dict[str, Any]) -> None:
        """Checks across parameters (after each was parsed); raise ConfigError naming the field."""

    def key_parts(self, params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Words of the scenario key before the frame size and after the core count; a parameter
        that differs from its default and that they leave out gets a word of its own after them
        (``perfkit.scenario.param_words``)."""
        return [str(params[self.variant])] if self.variant else [], []

    def legacy_params(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of a stored record written before records had a ``params`` column."""
        return {}

    def variant_label(self, value: Any) -> str:
        return self.variant_labels.get(str(value), str(value))

    # -- what a scenario needs ---------------------------------------------------------------------
    @abstractmethod
    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> Traffic:
        """The traffic profile of a scenario (validated ``params``)."""

    @abstractmethod
    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> DutProgram:
        """Load and configure the dataplane for ``traffic`` on DUT ports ``a`` and ``b`` (offered frames
        enter at ``traffic.ingress``); ``cpumap`` loads the program to run in a cpumap (several DUT
        cores)."""

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        """The reference model's answer for ``frame`` offered to a DUT set up for ``traffic`` (on the
        testbed's ports: ``load(traffic, 1, 2)``; the fuzz tests compare the kernel with it).
        Optional, with ``check_output`` (``has_model``)."""
        raise NotProvided("no reference model (emit)", self.name)

    def forwarding(self, traffic: Traffic) -> frozenset[str]:
        """The counters of the path ``traffic`` should take (``forward_counters``, unless the traffic
        is for the DUT's kernel, ``Traffic.to_socket``): every other counter that rises is a DUT drop."""
        return self.forward_counters

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        """None when ``frame`` is what the DUT should emit for some packet of ``traffic``, else one
        line saying what differs (the frames a sink or TRex captured, checked with the model).
        Optional, with ``emit`` (``has_model``)."""
        raise NotProvided("no reference model (check_output)", self.name)

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """prog-bench: the harness set-up and the loaded program (with its tables filled).
        Optional (``has_bench``)."""
        raise NotProvided("no prog-bench support (bench_spec)", self.name)

    @property
    def has_model(self) -> bool:
        """Whether the dataplane has a reference model: ``emit`` and ``check_output`` provided."""
        return type(self).emit is not Dataplane.emit and type(self).check_output is not Dataplane.check_output

    @property
    def has_bench(self) -> bool:
        """Whether ``bench_spec`` is provided (``perfkit prog-bench`` can drive the program)."""
        return type(self).bench_spec is not Dataplane.bench_spec

    def output_check(self, traffic: Traffic, frame: bytes) -> str | None:
        """``check_output``, or None without a model (the caller says "output not checked: no model")."""
        return self.check_output(traffic, frame) if self.has_model else None

    @property
    def prefix(self) -> str:
        """``metric_prefix``, or ``perfkit_<name>_``."""
        return self.metric_prefix or f"perfkit_{self.name}_"

    def min_frame_size(self, params: Mapping[str, Any]) -> int:
        """Smallest ``frame_size`` the traffic can carry (with the signature)."""
        return 64

    # -- what it exports to Prometheus -------------------------------------------------------------
    def counter_specs(self) -> tuple[CounterSpec, ...]:
        """The counters its loaded program exports (``DutProgram.counter_cells`` says where they are):
        by default packets and bytes per counter of ``<name>_stats`` (label ``outcome``: ``fwd``, a
        drop reason ...); a dataplane adds its own."""
        return (CounterSpec(f"{self.prefix}packets_total",
                            f"Packets the {self.title} counted, by what happened to them (outcome).",
                            ("outcome",), "packets"),
                CounterSpec(f"{self.prefix}bytes_total",
                            f"Frame bytes (as received) the {self.title} counted, by what happened to them.",
                            ("outcome",), "bytes"))
