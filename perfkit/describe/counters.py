"""A description's counters: an array (or per-CPU array) map with one entry per counter.

Each entry's index has a name: from a BTF enum (``names: enum mynf_stat``, or the map key's own
enum type), or listed in the file. A name is the enum member's in lower case without the prefix all
members share (``MYNF_FWD`` -> ``fwd``); members whose value is not an index of the map (a
``MYNF_STATS`` count) are left out. The packets (and bytes) of a counter are a field of the entry's
value (``packets: packets``), or the value itself. Per-CPU entries are summed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from perfkit.btf import Btf
from perfkit.dataplane import CounterCell
from perfkit.describe.btfconfig import MapRef
from perfkit.describe.schema import CountersSpec
from perfkit.errors import ConfigError


@dataclass(frozen=True)
class Field:
    """Where a count lives in an entry's value."""

    offset: int
    """[bytes] into the value."""
    size: int
    """[bytes]: 1, 2, 4 or 8 (the host's byte order)."""

    def read(self, value: bytes) -> int:
        return int.from_bytes(value[self.offset:self.offset + self.size], "little")


@dataclass(frozen=True)
class CounterLayout:
    """The counters of a loaded program: map, index names, the packets and bytes fields."""

    map: str
    names: tuple[tuple[int, str], ...]
    """(index, name) per counter."""
    packets: Field
    bytes: Field | None = None


def labels(members: dict[str, int]) -> dict[str, int]:
    """Enum members as counter names: lower case, without their common prefix."""
    prefix = os.path.commonprefix(list(members)) if len(members) > 1 else ""
    prefix = prefix[:prefix.rfind("_") + 1]
    return {name[len(prefix):].lower() or name.lower(): v for name, v in members.items()}


def layout(spec: CountersSpec, ref: MapRef, where: str) -> CounterLayout:
    """The counters ``spec`` describes, checked against the map and its BTF."""
    m, btf = ref.map, ref.btf
    if spec.names and not isinstance(spec.names, str):
        if len(spec.names) > m.max_entries:
            raise ConfigError(f"{where}.names", list(spec.names), f"at most {m.max_entries} names (the map's entries)")
        names = tuple(enumerate(spec.names))
    else:
        members = _enum(spec, ref, btf, where)
        names = tuple(sorted(((v, n) for n, v in labels(members).items() if 0 <= v < m.max_entries)))
    packets = _field(btf, ref, spec.packets, f"{where}.packets")
    count_bytes = _field(btf, ref, spec.bytes, f"{where}.bytes") if spec.bytes else None
    known = {n for _, n in names}
    for key in ("forward", "drop"):
        for n in getattr(spec, key):
            if n not in known:
                raise ConfigError(f"{where}.{key}", n, ", ".join(sorted(known)))
    return CounterLayout(m.name, names, packets, count_bytes)


def _enum(spec: CountersSpec, ref: MapRef, btf: Btf | None, where: str) -> dict[str, int]:
    if btf is None:
        raise ConfigError(f"{where}.names", spec.names or None, "a list of names (the object has no BTF for an enum)")
    if isinstance(spec.names, str):
        enum = spec.names.removeprefix("enum ").strip()
        members = btf.enum(enum)
        if not members:
            raise ConfigError(f"{where}.names", spec.names, "enum NAME of an enum in the object's BTF, or a list of names")
        return members
    members = btf.enum_of(ref.key_type) if ref.key_type else {}
    if not members:
        raise ConfigError(f"{where}.names", None, f"enum NAME or a list of names (map {ref.map.name}'s key is no enum)")
    return members


def _field(btf: Btf | None, ref: MapRef, name: str, where: str) -> Field:
    size = ref.map.value_size
    if btf is None or not ref.value_type:
        if name and name != "packets":
            raise ConfigError(where, name, "none: the map declares no BTF value type (the value is the count)")
        return Field(0, size if size in (1, 2, 4, 8) else 8)
    members = btf.fields(ref.value_type)
    if not members:  # a plain integer value
        return Field(0, btf.size(ref.value_type))
    for m in members:
        if m.name == name:
            fsize = btf.size(m.type_id)
            if fsize not in (1, 2, 4, 8):
                raise ConfigError(where, name, "an integer field of 1, 2, 4 or 8 bytes")
            return Field(m.offset, fsize)
    raise ConfigError(where, name, f"a field of {btf.name(ref.value_type)}: {', '.join(m.name for m in members)}")


def read(lay: CounterLayout, ref: MapRef, what: Field | None = None) -> dict[int, dict[str, int]]:
    """Each counter's count (``what``: default packets) by CPU (one CPU, 0, for a map not per CPU)."""
    f = what or lay.packets
    out: dict[int, dict[str, int]] = {}
    for index, name in lay.names:
        raw = ref.map.lookup(index.to_bytes(4, "little")) or b""
        values = ref.map.percpu_values(raw) if ref.map.percpu else [raw]
        for cpu, v in enumerate(values):
            out.setdefault(cpu, {})[name] = f.read(v) if v else 0
    return out


def cells(dataplane: str, lay: CounterLayout | None) -> list[CounterCell]:
    """Where each series lives (64-bit fields only: what the exporter reads)."""
    if lay is None:
        return []
    out = []
    for unit, f in (("packets", lay.packets), ("bytes", lay.bytes)):
        if f is None or f.size != 8:
            continue
        out += [CounterCell(f"perfkit_{dataplane}_{unit}_total", (name,), lay.map, i, f.offset) for i, name in lay.names]
    return out
