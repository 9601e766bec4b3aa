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
- ``BenchSpec``: what prog-bench needs to drive the program through its intended path.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from perfkit.errors import ConfigError
from perfkit.libbpf import Program
from perfkit.stl.fieldengine import FieldEngine
from perfkit.units import FCS_LEN

#: Steering keys ``bpf/steer.bpf.c`` knows (``enum steer_key``, lower case): how DUT cores share traffic.
STEER_KEYS = ("daddr", "gtpu_teid", "flow")


@dataclass(frozen=True)
class Emitted:
    """A reference model's answer for one frame."""

    verdict: str
    """XDP_PASS, XDP_DROP, XDP_REDIRECT or XDP_TX."""
    stat: str
    """The counter it goes to (``ul_fwd``, ``drop_unknown_teid`` ...)."""
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

    @abstractmethod
    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The frame offered for ``flow`` with a signature (``perfkit.stl.signature.SIGNATURE``)."""

    @abstractmethod
    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """What a correct DUT emits for ``packet(flow, ...)`` (the reference model's answer)."""

    @abstractmethod
    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        """How the generator turns ``packet(0)`` into ``packet(i)`` for every flow i."""

    @property
    def wire_frame_size(self) -> int:
        """Bytes per offered frame, FCS included."""
        return len(self.packet(0)) + FCS_LEN

    @property
    def output_frame_size(self) -> int:
        """Bytes per frame the DUT should emit, FCS included."""
        return len(self.expected_output(0)) + FCS_LEN


class DutProgram(ABC):
    """A dataplane loaded into the kernel and configured for one traffic profile."""

    @property
    @abstractmethod
    def program(self) -> Program:
        """The XDP program to attach to the DUT ports (or to run in a cpumap)."""

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """Packets per dataplane counter since load (summed over CPUs)."""

    def close(self) -> None:
        """Release the kernel objects (idempotent)."""


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
    """How plots name the variant's values (``ul`` -> ``UL (GTP-U decap)``)."""
    forward_counters: frozenset[str] = frozenset()
    """Counters of packets forwarded to the tester; every other counter that rises is a DUT drop."""
    steer_key: str = "daddr"
    """How ``bpf/steer.bpf.c`` spreads packets over several DUT cores (one of ``STEER_KEYS``)."""
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
        """Words of the scenario key before the frame size and after the core count."""
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
