"""A description as a ``perfkit.dataplane.Dataplane``: ``DescribedDataplane`` and its loaded program.

``DescribedDut`` loads the program for one scenario, in one of two ways:

- ``attach: perfkit``: the object (built and cached, ``perfkit.describe.build``) is opened, its
  globals set through BTF, loaded (a verifier rejection is refused with the verifier's last lines),
  its maps filled and its hooks run; the testbed attaches ``program`` on the DUT port traffic enters.
- ``attach: {setup, teardown}``: the NF's own loader attaches and configures it. ``setup`` runs in
  the DUT's network namespace with the testbed values substituted (``{dev_a}``, ``{ifindex_a}``,
  ``{object}`` ...); the program attached on the ingress port is then found by its ifindex through
  the kernel, and measured (``attached_by_nf``: the testbed neither attaches nor detaches it; ``close``
  runs ``teardown``). A setup that attached nothing is refused, after its teardown ran.

Whatever fails after the object was loaded or the setup ran closes it again (and runs the
teardown): a refused description leaves nothing attached or loaded.
"""
from __future__ import annotations

import hashlib
import os
import socket
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from perfkit import dataplane as seam
from perfkit.btf import Btf
from perfkit.dataplane import BenchSpec, CounterCell, CounterSpec, Dataplane, DutProgram, Emitted, Traffic
from perfkit.describe import build, counters, hooks
from perfkit.describe.btfconfig import MapRef, write_globals, write_maps
from perfkit.describe.schema import Description
from perfkit.describe.traffic import DescribedTraffic, Model
from perfkit.describe.traffic import build as build_traffic
from perfkit.describe.values import resolve, substitute, testbed_values
from perfkit.errors import BpfError, ConfigError
from perfkit.libbpf import (BPF_XDP_CPUMAP, XDP_VERDICTS, BpfObject, Map, Program, VerifierError, map_info,
                            prog_from_id, prog_map_ids, xdp_prog_id)
from perfkit.testbed import netns as nets

#: Lines of the verifier's log a rejection quotes.
VERIFIER_TAIL = 3


def _not_provided(what: str, dp: Dataplane) -> ConfigError:
    """The seam's refusal of an optional part: ``dataplane mynf: no prog-bench support (bench_spec)``."""
    return seam.NotProvided(what, dp.name)


class DescribedDut(DutProgram):
    """A description's program loaded (or found attached) and configured for one traffic profile."""

    def __init__(self, desc: Description, traffic: DescribedTraffic, ifindex_a: int, ifindex_b: int,
                 cpumap: bool = False, netns: str | None = None):
        self.desc, self.traffic = desc, traffic
        self.attached_by_nf = desc.attach.by_nf
        self.netns = netns
        self.obj: BpfObject | None = None
        self._program: Program | None = None
        self._maps: dict[str, MapRef] = {}
        self._own_maps: list[Map] = []
        self._teardown = ""
        self.object = build.object_path(desc, dict(traffic.params)) if desc.program.object else None
        self.values = testbed_values(ifindex_a, ifindex_b, dict(traffic.params), object=str(self.object or ""),
                                     dir=str(desc.dir))
        self.where = desc.path.name
        try:
            # the DUT's namespace: a devmap resolves an ifindex in the namespace of whoever writes it
            self.netns = netns or dut_namespace(ifindex_a, ifindex_b)
            if self.attached_by_nf:
                self._set_up(ifindex_a if traffic.ingress == "a" else ifindex_b)
            else:
                self._load(cpumap)
            with nets.inside(self.netns):
                self._configure()
            self.layout = (counters.layout(desc.counters, self._ref(desc.counters.map, f"{self.where}: counters.map"),
                                           f"{self.where}: counters") if desc.counters else None)
        except BaseException:
            self.close()
            raise

    # -- loading -----------------------------------------------------------------------------------
    def _load(self, cpumap: bool) -> None:
        assert self.object is not None
        btf: list[Btf | None] = [None]
        name = self.desc.program.name

        def before_load(obj: BpfObject) -> None:
            names = obj.program_names()
            if name not in names:
                raise ConfigError(f"{self.where}: program.name", name,
                                  f"a program of {self.object.name}: {', '.join(names) or 'none'}")  # type: ignore[union-attr]
            raw = obj.btf_raw()
            btf[0] = Btf.from_raw(raw) if raw else None
            if cpumap:
                obj.set_expected_attach_type(name, BPF_XDP_CPUMAP)
            glob = {k: resolve(f"{self.where}: config.globals.{k}", v, self.values)
                    for k, v in self.desc.config.globals.items()}
            write_globals(btf[0], glob, obj.initial_value, obj.set_initial_value, obj.map_names(),
                          f"{self.where}: config.globals")

        try:
            self.obj = BpfObject(self.object, before_load=before_load, verifier_log=True)
        except VerifierError as err:
            tail = " | ".join(line for line in err.log.strip().splitlines()[-VERIFIER_TAIL:])
            raise ConfigError(f"{self.where}: program.name", name,
                              f"a program the kernel's verifier accepts; it said: {tail or err}") from None
        except BpfError as err:
            if not err.what.startswith("bpf_object__open_file"):
                raise
            raise ConfigError(f"{self.where}: program.object", str(self.object),
                              f"an object libbpf opens ({err}; maps defined in .maps need BTF: clang -g)") from None
        self._program = self.obj.program(name)
        for m in self.obj.map_names():
            if "." in m:  # .rodata, .data, .bss: written as globals
                continue
            key_type, value_type = self.obj.map_btf_ids(m)
            self._maps[m] = MapRef(self.obj.map(m), key_type, value_type, btf[0])

    def _set_up(self, ingress: int) -> None:
        for port in ("a", "b"):
            self.values[f"dev_{port}"] = _dev_name(self.netns, self.values[f"ifindex_{port}"])
        self.values["netns"] = self.netns or ""
        where = f"{self.where}: attach.setup"
        self._teardown = substitute(f"{self.where}: attach.teardown", self.desc.attach.teardown, self.values)
        cmd = substitute(where, self.desc.attach.setup, self.values)
        hooks.command(where, cmd, self.desc.dir, self.netns)
        prog_id = attached_program(self.netns, ingress)
        dev = self.values["dev_a" if self.traffic.ingress == "a" else "dev_b"]
        if not prog_id:
            raise ConfigError(where, cmd, f"a command that attaches an XDP program to {dev} (the DUT port traffic "
                              "enters); it attached nothing")
        self._program = prog_from_id(prog_id)
        want = self.desc.program.name[:15]  # the kernel keeps 15 characters of a name
        if self._program.name != want:
            raise ConfigError(f"{self.where}: program.name", self.desc.program.name,
                              f"the program setup attached to {dev}: {self._program.name}")
        for map_id in prog_map_ids(self._program.fd):
            m = Map.from_id(map_id)
            self._own_maps.append(m)
            if "." in m.name:
                continue
            info = map_info(m.fd)
            btf = Btf.from_id(info.btf_id) if info.btf_id else None
            self._maps[m.name] = MapRef(m, info.btf_key_type_id, info.btf_value_type_id, btf)

    def _configure(self) -> None:
        cfg = self.desc.config
        write_maps(self._maps, cfg.maps, f"{self.where}: config.maps",
                   lambda where, v: resolve(where, v, self.values))
        if cfg.python:
            fn = hooks.function(f"{self.where}: config.python", cfg.python, self.desc.dir)
            fn(self.obj, hooks.HookScenario(dict(self.traffic.params), dict(self.values), self.traffic, self.map_ids_all()))
        if cfg.command:
            cmd = substitute(f"{self.where}: config.command", cfg.command, {**self.values, "map_id": self.map_ids_all()})
            hooks.command(f"{self.where}: config.command", cmd, self.desc.dir, self.netns)

    def _ref(self, name: str, where: str) -> MapRef:
        if name not in self._maps:
            raise ConfigError(where, name, "a map of the program: " + ", ".join(sorted(self._maps)))
        return self._maps[name]

    # -- DutProgram ----------------------------------------------------------------------------------
    @property
    def program(self) -> Program:
        assert self._program is not None
        return self._program

    def counters(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for counts in self.counters_per_cpu().values():
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
        return totals

    def counters_per_cpu(self) -> dict[int, dict[str, int]]:
        if self.layout is None:
            return {}
        return counters.read(self.layout, self._maps[self.layout.map])

    def counter_cells(self) -> list[CounterCell]:
        return counters.cells(self.desc.name, self.layout)

    def map_ids_all(self) -> dict[str, int]:
        """Kernel ids of every map of the program, by name."""
        return {n: r.map.id for n, r in self._maps.items()}

    def map_ids(self) -> dict[str, int]:
        return {c.map: self._maps[c.map].map.id for c in self.counter_cells()}

    def object_hashes(self) -> dict[str, str]:
        """sha256 of the object file loaded, by path ({} when the NF's loader loaded its own)."""
        if self.object is None or self.attached_by_nf:
            return {}
        return {str(self.object): hashlib.sha256(Path(self.object).read_bytes()).hexdigest()}

    def close(self) -> None:
        for m in self._own_maps:
            m.close()
        self._own_maps = []
        if self.attached_by_nf and self._program is not None:
            os.close(self._program.fd)
        self._program = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        teardown, self._teardown = self._teardown, ""
        if teardown:
            hooks.command(f"{self.where}: attach.teardown", teardown, self.desc.dir, self.netns)


def attached_program(ns: str | None, ifindex: int) -> int:
    """The id of the XDP program attached to ``ifindex`` in ``ns`` (native, else generic); 0: none."""
    with nets.inside(ns):
        for mode in ("native", "generic"):
            prog_id = xdp_prog_id(ifindex, mode)
            if prog_id:
                return prog_id
    return 0


def _dev_name(ns: str | None, ifindex: int) -> str:
    with nets.inside(ns):
        try:
            return socket.if_indextoname(ifindex)
        except OSError:
            raise ConfigError("ifindex", ifindex, f"an interface of namespace {ns}") from None


def dut_namespace(ifindex_a: int, ifindex_b: int) -> str | None:
    """The DUT namespace of this process's testbed whose ports have these indexes (None: none is up:
    the ports are in this namespace). Ambiguous (two testbeds of this process): refused."""
    from perfkit import owners
    from perfkit.testbed.topology import _NS_RE, owner_record
    found = []
    for ns in nets.names():
        m = _NS_RE.match(ns)
        if not m or m.group(2) != "dut":
            continue
        rid = m.group(1)
        if not owners.same((owner_record(rid) or {}).get("owner"), owners.me()):
            continue
        try:
            if nets.ifindex(ns, f"d{rid}a") == ifindex_a and nets.ifindex(ns, f"d{rid}b") == ifindex_b:
                found.append(ns)
        except Exception:  # noqa: BLE001 - a testbed going down meanwhile
            continue
    if len(found) > 1:
        raise ConfigError("netns", None, f"one of {', '.join(found)}: this process has several testbeds whose DUT "
                          "ports have these indexes (pass the DUT's namespace to load)")
    return found[0] if found else None


class DescribedDataplane(Dataplane):
    """A network function described by a file (``perfkit.describe.load``)."""

    api_version = seam.API_VERSION
    ports = ("a", "b")
    #: ``load`` takes ``netns``, the DUT's namespace (``perfkit.testbed.dut.Dut`` passes it).
    loads_in_netns = True

    def __init__(self, desc: Description):
        self.desc = desc
        self.name = desc.name
        self.title = desc.title
        self.params = desc.all_params()
        self.variant = desc.variant
        self.forward_counters = frozenset(desc.counters.forward if desc.counters else ())
        self.encaps = _encaps(desc)
        self.path = desc.path

    @cached_property
    def _model(self) -> Model | None:
        if not self.desc.model:
            return None
        return hooks.function(f"{self.desc.path.name}: model", self.desc.model, self.desc.dir)

    @property
    def has_model(self) -> bool:
        return bool(self.desc.model)

    @property
    def has_bench(self) -> bool:
        """prog-bench runs the program alone: perfkit must load it (not the NF's own loader), and its
        counters must prove the path (``bench_missing``)."""
        return not self.bench_missing()

    def bench_missing(self) -> str:
        """Why prog-bench cannot drive this description's program ('' when it can)."""
        if self.desc.attach.by_nf:
            return "no prog-bench support: its own loader attaches it (attach.setup), prog-bench loads the object itself"
        if self.desc.counters is None:
            return "no prog-bench support: no counters to prove the path its frame takes (counters)"
        return ""

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> DescribedTraffic:
        return build_traffic(self.desc, frame_size, flows, dict(params), self._model)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False,
             netns: str | None = None) -> DescribedDut:
        """``netns``: the DUT's namespace, where ``attach.setup`` runs (default: this process's testbed
        whose DUT ports have these indexes)."""
        assert isinstance(traffic, DescribedTraffic)
        return DescribedDut(self.desc, traffic, ifindex_a, ifindex_b, cpumap, netns)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        """The model's answer: an output frame (the traffic's verdict), or a verdict name."""
        if self._model is None:
            raise _not_provided("no reference model (emit)", self)
        out = self._model(frame, traffic)
        if isinstance(out, Emitted):
            return out
        if isinstance(out, (bytes, bytearray)):
            return Emitted(getattr(traffic, "verdict", "XDP_REDIRECT"), "model", bytes(out))
        if out in XDP_VERDICTS.values():
            return Emitted(str(out), "model")
        raise ConfigError(f"{self.desc.path.name}: model", repr(out)[:60], "an output frame (bytes), a verdict "
                          "name (XDP_DROP ...) or a perfkit.dataplane.Emitted")

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        """None when ``frame`` is what the model emits for the offered frame with the same signature
        (stream 0's frame: a profile's varied fields are not compared), else the first difference."""
        if self._model is None:
            raise _not_provided("no reference model (check_output)", self)
        assert isinstance(traffic, DescribedTraffic)
        from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
        sig = traffic.compiled.streams[0].sig_offset
        want0 = self.emit(traffic, traffic.packet(0)).out
        if want0 is None:
            return "the model does not forward the profile's frame"
        at = sig + len(want0) - len(traffic.packet(0)) if sig else 0
        seq = stream = ts = 0
        if sig and len(frame) >= at + SIGNATURE.size:
            magic, stream, seq, ts = SIGNATURE.unpack_from(frame, at)
            if magic != SIGNATURE_MAGIC:
                return f"no signature at byte {at} (magic 0x{magic:04x})"
        want = self.emit(traffic, traffic.packet(0, seq, stream, ts)).out or b""
        if len(frame) != len(want):
            return f"frame is {len(frame)} bytes, expected {len(want)}"
        varied = _varied(traffic)
        for i, (g, w) in enumerate(zip(frame, want)):
            if g != w and i not in varied:
                return f"byte {i} is 0x{g:02x}, expected 0x{w:02x}"
        return None

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """The profile's first stream's frame, as it is (no keys: the harness restores the same frame
        before every run), on the program loaded as ``perfkit dataplane check`` loads it (ports 1
        and 2 of this namespace). The path counter is the one counter that frame raises, once run
        through the program: it must be one of ``counters.forward``. The expected answer is the
        model's; without one, only the verdict (``traffic.verdict``) is checked."""
        if why := self.bench_missing():
            raise _not_provided(why, self)
        params = self.validate(params)
        traffic = self.traffic(frame_size, 1, params)
        frame = traffic.packet(0)
        dut = self.load(traffic, 1, 2)
        try:
            path = _path_counter(self, traffic, dut, frame)
            expected = self.emit(traffic, frame) if self.has_model else Emitted(traffic.verdict, path)
        except BaseException:
            dut.close()
            raise
        spec = BenchSpec(frame=frame, fields=(), keys=np.zeros((0, 16), dtype=np.uint8), path_counter=path,
                         expected=expected, description={"profile": self.desc.traffic.profile.name})
        return spec, dut

    def counter_specs(self) -> tuple[CounterSpec, ...]:
        c = self.desc.counters
        if c is None:
            return ()
        out = [CounterSpec(f"perfkit_{self.name}_packets_total", f"Packets the {self.title} counted, by outcome.",
                           ("outcome",), "packets")]
        if c.bytes:
            out.append(CounterSpec(f"perfkit_{self.name}_bytes_total", f"Bytes the {self.title} counted, by outcome.",
                                   ("outcome",), "bytes"))
        return tuple(out)


def _path_counter(dp: DescribedDataplane, traffic: DescribedTraffic, dut: DutProgram, frame: bytes) -> str:
    """The counter ``frame`` raises, run once through the program; refused unless it is exactly one
    of the forwarding counters."""
    before = dut.counters()
    res = dut.program.test_run(frame)
    after = dut.counters()
    rose = sorted(k for k in after if after[k] != before.get(k, 0))
    forward = sorted(dp.forwarding(traffic))
    if len(rose) != 1 or (forward and rose[0] not in forward):
        raise ConfigError(f"{dp.desc.path.name}: traffic.profile", dp.desc.traffic.profile.name,
                          f"a profile whose first frame the program counts once, as forwarded "
                          f"({', '.join(forward) or 'a counter'}); it got {res.verdict} and raised "
                          f"{', '.join(rose) or 'no counter'}")
    return rose[0]


def _varied(traffic: DescribedTraffic) -> set[int]:
    """Byte offsets the profile's field engine writes (and the checksums it fixes), not compared."""
    out: set[int] = set()
    for s in traffic.stl_profile.streams:
        for ins in s.program:
            if ins.kind in ("write", "write_mask"):
                out |= set(range(ins.offset, ins.offset + ins.size))
            elif ins.kind == "csum_ipv4":
                out |= {ins.offset + 10, ins.offset + 11}
            elif ins.kind in ("csum_hw", "csum_icmpv6"):
                out |= set(range(ins.l2_len, ins.l2_len + ins.l3_len + 8))
    return out


def _encaps(desc: Description) -> tuple:
    if not desc.traffic.encaps:
        return ()
    from perfkit import dataplanes
    known = {e.name: e for e in dataplanes.encapsulations()}
    for n in desc.traffic.encaps:
        if n not in known:
            raise ConfigError(f"{desc.path.name}: traffic.encaps", n, ", ".join(known) or "none")
    return tuple(known[n] for n in desc.traffic.encaps)
