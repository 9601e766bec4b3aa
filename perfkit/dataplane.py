"""The seam between perfkit and a network function: the ``Dataplane`` interface.

Everything perfkit measures with (testbed, generators, searches, campaigns, prog-bench, metrics,
analysis, report, CLI) knows a dataplane only through this module. A dataplane is a package
``perfkit/dataplanes/<name>/`` whose ``DATAPLANE`` is an instance of a ``Dataplane`` subclass; it
holds its control plane, its independent reference model, its traffic profiles, its layouts mirror
and the meaning of its scenario parameters. ``perfkit.dataplanes.get(name)`` finds it.

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
from typing import Any, ClassVar, Mapping, Self

import numpy as np

from perfkit.encap import BY_DADDR, Encap, Steering
from perfkit.errors import ConfigError
from perfkit.layouts import Struct
from perfkit.libbpf import BPF_XDP_CPUMAP, BpfObject, Map, Program
from perfkit.provenance import object_hashes
from perfkit.stl.fieldengine import FieldEngine
from perfkit.testbed.bpfbuild import object_path
from perfkit.testbed.topology import PORT_MACS
from perfkit.units import FCS_LEN


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

    @abstractmethod
    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct DUT emits for ``packet(flow, ...)`` (the reference model's answer)."""

    @abstractmethod
    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """How the generator turns ``packet(0)`` into ``packet(i)`` for every flow i."""

    @abstractmethod
    def on_ports(self, macs: PortMacs) -> Self:
        """The same traffic between ports with the MAC addresses ``macs`` (a lab's inventory's):
        offered frames addressed to the DUT's ingress port, the DUT configured to address the tester."""

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
        """Bytes per frame the DUT should emit, FCS included."""
        return len(self.expected_output(0)) + FCS_LEN


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
    """The control plane of a dataplane's XDP program ``bpf/<name>.bpf.c``, loaded: the object
    ``<name>.o``, its entry program ``xdp_<name>``, its configuration (the one entry of the array map
    ``<name>_config``) and its counters (the per-CPU array ``<name>_stats``, one record per counter).

    A dataplane's control is a dataclass subclass that sets the class attributes and ``config``'s
    default, and adds what it alone has (sessions, VIPs); its ``load`` is
    ``cls(cls.open(...), ...).start()``."""

    name: ClassVar[str] = "abstract"
    """The program's stem: ``bpf/<name>.bpf.c``."""
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
        """``build/bpf/<name>.o`` (or ``path``) loaded into the kernel, with map sizes and constants set;
        ``cpumap``: its entry program made to run in a cpumap (several DUT cores)."""
        return BpfObject(Path(path) if path else object_path(cls.name), max_entries=max_entries, rodata=rodata,
                         attach_types={f"xdp_{cls.name}": BPF_XDP_CPUMAP} if cpumap else None)

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
        return self.obj.program(f"xdp_{self.name}")

    def map(self, name: str) -> Map:
        return self.obj.map(name)

    def configure(self, config: Any) -> None:
        self.map(f"{self.name}_config").update(KEY0, config.to_struct())
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
        return {s.label: self.summed(f"{self.name}_stats", int(s)) for s in list(self.stat)[:-1]}  # type: ignore[attr-defined]

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
        """Every counter of ``<name>_stats``, packets and bytes, by its label (``outcome``); a
        dataplane's DUT adds its own (per VIP, per real ...)."""
        name, rec = self.control.name, self.control.stat_rec
        out = []
        for s in list(self.control.stat)[:-1]:  # type: ignore[attr-defined]
            for unit in ("packets", "bytes"):
                out.append(CounterCell(f"perfkit_{name}_{unit}_total", (s.label,), f"{name}_stats", int(s),
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
            for cpu, rec in enumerate(self.control.per_cpu(f"{self.control.name}_stats", int(s))):
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
    """Registry name, ``bpf/<name>.bpf.c``'s stem and the campaign's ``dataplane``."""
    title: str = "abstract"
    """For people: ``PGW-U``, ``L4 load balancer``."""
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

    @abstractmethod
    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        """The reference model's answer for ``frame`` offered to a DUT set up for ``traffic`` (on the
        testbed's ports: ``load(traffic, 1, 2)``; the fuzz tests compare the kernel with it)."""

    def forwarding(self, traffic: Traffic) -> frozenset[str]:
        """The counters of the path ``traffic`` should take (``forward_counters``, unless the traffic
        is for the DUT's kernel, ``Traffic.to_socket``): every other counter that rises is a DUT drop."""
        return self.forward_counters

    @abstractmethod
    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        """None when ``frame`` is what the DUT should emit for some packet of ``traffic``, else one
        line saying what differs (the frames a sink or TRex captured, checked with the model)."""

    @abstractmethod
    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """prog-bench: the harness set-up and the loaded program (with its tables filled)."""

    def min_frame_size(self, params: Mapping[str, Any]) -> int:
        """Smallest ``frame_size`` the traffic can carry (with the signature)."""
        return 64

    # -- what it exports to Prometheus -------------------------------------------------------------
    def counter_specs(self) -> tuple[CounterSpec, ...]:
        """The counters its loaded program exports (``DutProgram.counter_cells`` says where they are):
        by default packets and bytes per counter of ``<name>_stats`` (label ``outcome``: ``fwd``, a
        drop reason ...); a dataplane adds its own."""
        return (CounterSpec(f"perfkit_{self.name}_packets_total",
                            f"Packets the {self.title} counted, by what happened to them (outcome).",
                            ("outcome",), "packets"),
                CounterSpec(f"perfkit_{self.name}_bytes_total",
                            f"Frame bytes (as received) the {self.title} counted, by what happened to them.",
                            ("outcome",), "bytes"))
