"""A program's configuration written through its BTF: globals by name, map entries by field names.

``encode`` turns a value as a description writes it into the bytes of a BTF type:

- integers (and enums, by a member's name) in the byte order BTF declares (``__be16``, ``__be32``,
  ``__be64``: network order; else the host's), refused when they do not fit;
- an IPv4 address (``198.18.0.1``) into any 4-byte integer or ``u8[4]``, in network order; an IPv6
  address into ``u8[16]``; a MAC (``02:00:00:00:01:01``) into ``u8[6]``; other strings into ``char[N]``;
- structs and unions as mappings by member name (members not named are zero), arrays as lists;
- an LPM trie key (a struct whose first member is ``prefixlen``) also as ``ADDRESS/LEN``.

``write_globals`` sets ``.rodata``/``.data``/``.bss`` variables before the object is loaded;
``write_maps`` writes entries of hash, array, per-CPU, LRU, LPM and devmap maps after it is.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from perfkit.btf import Btf
from perfkit.describe.schema import Entry
from perfkit.errors import ConfigError
from perfkit.libbpf import Map, num_possible_cpus

_MAC = re.compile(r"^[0-9a-fA-F]{2}([:-][0-9a-fA-F]{2}){5}$")
#: Global-data sections, as BTF names them.
DATA_SECTIONS = (".rodata", ".data", ".bss")


@dataclass
class MapRef:
    """A loaded map with its BTF: what ``write_maps`` writes into."""

    map: Map
    key_type: int
    """BTF type id of the key (0: not declared)."""
    value_type: int
    btf: Btf | None


def encode(btf: Btf, type_id: int, value: Any, where: str) -> bytes:
    """``value`` as the bytes of BTF type ``type_id``."""
    rid = btf.resolve(type_id)
    t = btf.get(rid)
    kind, size = t["kind"], btf.size(rid)
    if kind in ("INT", "ENUM", "ENUM64"):
        return _integer(btf, type_id, value, where, size, signed=t.get("encoding") == "SIGNED")
    if kind == "ARRAY":
        return _array(btf, t, value, where, size)
    if kind in ("STRUCT", "UNION"):
        return _struct(btf, rid, value, where, size)
    raise ConfigError(where, value, f"a type perfkit can write ({btf.name(type_id)} is a {kind.lower()})")


def _integer(btf: Btf, type_id: int, value: Any, where: str, size: int, signed: bool) -> bytes:
    big = btf.big_endian(type_id)
    members = btf.enum_of(type_id)
    if isinstance(value, str) and value in members:
        value = members[value]
    elif isinstance(value, str) and size == 4 and _ipv4(value) is not None:
        return _ipv4(value) or b""
    elif isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            raise ConfigError(where, value, _allowed_int(btf, type_id, size, signed, members)) from None
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        raise ConfigError(where, value, _allowed_int(btf, type_id, size, signed, members))
    lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed else (0, (1 << (8 * size)) - 1)
    if not lo <= value <= hi:
        raise ConfigError(where, value, _allowed_int(btf, type_id, size, signed, members))
    return value.to_bytes(size, "big" if big else "little", signed=signed)


def _allowed_int(btf: Btf, type_id: int, size: int, signed: bool, members: Mapping[str, int]) -> str:
    lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed else (0, (1 << (8 * size)) - 1)
    what = f"an integer {lo} .. {hi} ({btf.name(type_id)}"
    what += ", network byte order)" if btf.big_endian(type_id) else ")"
    if members:
        what += " or one of " + ", ".join(members)
    if size == 4:
        what += " or an IPv4 address"
    return what


def _ipv4(text: str) -> bytes | None:
    try:
        return ipaddress.IPv4Address(text).packed
    except ValueError:
        return None


def _array(btf: Btf, t: dict[str, Any], value: Any, where: str, size: int) -> bytes:
    n, elem = int(t["nr_elems"]), int(t["type_id"])
    esize = btf.size(elem)
    if isinstance(value, str) and esize == 1:
        if n == 6 and _MAC.match(value):
            return bytes(int(x, 16) for x in re.split("[:-]", value))
        if n in (4, 16):
            try:
                return ipaddress.ip_address(value).packed if len(ipaddress.ip_address(value).packed) == n else _bad(where, value, n)
            except ValueError:
                pass
        if btf.get(btf.resolve(elem)).get("name") == "char" and len(value.encode()) < n:
            return value.encode().ljust(n, b"\0")
        raise ConfigError(where, value, f"for {btf.name(int(t['type_id']))}[{n}]: " + (
            "a MAC address" if n == 6 else "an IPv4 address" if n == 4 else "an IPv6 address" if n == 16
            else f"a string of < {n} bytes" if btf.get(btf.resolve(elem)).get("name") == "char" else f"a list of {n} values"))
    if not isinstance(value, list) or len(value) > n:
        raise ConfigError(where, value, f"a list of up to {n} values ({btf.name(elem)}[{n}])")
    out = b"".join(encode(btf, elem, v, f"{where}[{i}]") for i, v in enumerate(value))
    return out.ljust(size, b"\0")


def _bad(where: str, value: str, n: int) -> bytes:
    raise ConfigError(where, value, "an IPv4 address" if n == 4 else "an IPv6 address")


def _struct(btf: Btf, rid: int, value: Any, where: str, size: int) -> bytes:
    members = btf.fields(rid)
    if isinstance(value, str) and "/" in value and members and members[0].name == "prefixlen" and len(members) == 2:
        addr, _, plen = value.partition("/")
        value = {members[0].name: int(plen), members[1].name: addr}
    if not isinstance(value, Mapping):
        raise ConfigError(where, value, f"a mapping of {btf.name(rid)}'s fields: {', '.join(m.name for m in members)}")
    out = bytearray(size)
    by_name = {m.name: m for m in members}
    for name, v in value.items():
        m = by_name.get(name)
        if m is None:
            raise ConfigError(f"{where}.{name}", v, f"a field of {btf.name(rid)}: {', '.join(by_name) or 'none'}")
        if m.bits:
            raise ConfigError(f"{where}.{name}", v, "a field that is not a bitfield (perfkit writes whole fields)")
        data = encode(btf, m.type_id, v, f"{where}.{name}")
        out[m.offset:m.offset + len(data)] = data
    return bytes(out)


# -- globals ---------------------------------------------------------------------------------------
def write_globals(btf: Btf | None, globals_: Mapping[str, Any], initial: Callable[[str], bytes],
                  set_initial: Callable[[str, bytes], None], map_names: list[str], where: str) -> None:
    """Set each global of ``globals_`` in its section's initial value (before load).

    ``initial``/``set_initial`` read and write a section map's initial value by its name in the
    object (libbpf calls ``.rodata`` of ``x.o`` ``x.rodata``)."""
    if not globals_:
        return
    if btf is None:
        raise ConfigError(where, sorted(globals_), "an object with BTF (built with clang -g) where globals are named")
    found: dict[str, tuple[str, Any]] = {}
    for section in DATA_SECTIONS:
        for name, var in btf.section(section).items():
            found[name] = (section, var)
    changed: dict[str, bytearray] = {}
    for name, value in globals_.items():
        if name not in found:
            raise ConfigError(f"{where}.{name}", value, "a global of the object's .rodata, .data or .bss: "
                              + (", ".join(sorted(found)) or "none"))
        section, var = found[name]
        mname = next((m for m in map_names if m.endswith(section)), None)
        if mname is None:
            raise ConfigError(f"{where}.{name}", value, f"a global of a section the object has ({section} has no map)")
        data = encode(btf, var.type_id, value, f"{where}.{name}")
        buf = changed.setdefault(mname, bytearray(initial(mname)))
        buf[var.offset:var.offset + len(data)] = data
    for mname, buf in changed.items():
        set_initial(mname, bytes(buf))


# -- maps ------------------------------------------------------------------------------------------
def write_maps(maps: Mapping[str, MapRef], entries: Mapping[str, tuple[Entry, ...]], where: str,
               resolve: Callable[[str, Any], Any]) -> None:
    """Write every entry of ``entries`` (by map name) into ``maps``; ``resolve`` substitutes values."""
    for name, items in entries.items():
        ref = maps.get(name)
        if ref is None:
            raise ConfigError(f"{where}", name, "a map of the program: " + ", ".join(sorted(maps)))
        for i, e in enumerate(items):
            at = f"{where}.{name}[{i}]"
            key = _bytes(ref, ref.key_type, ref.map.key_size, resolve(f"{at}.key", e.key), f"{at}.key")
            value = _bytes(ref, ref.value_type, ref.map.value_size, resolve(f"{at}.value", e.value), f"{at}.value")
            if ref.map.percpu:
                stride = (ref.map.value_size + 7) & ~7
                value = value.ljust(stride, b"\0") * num_possible_cpus()
            ref.map.update(key, value)


def _bytes(ref: MapRef, type_id: int, size: int, value: Any, where: str) -> bytes:
    """A key or value: through BTF when the map declares it, else an integer of ``size`` bytes."""
    if type_id and ref.btf is not None:
        data = encode(ref.btf, type_id, value, where)
    elif isinstance(value, int) and not isinstance(value, bool) and size in (1, 2, 4, 8) and 0 <= value < 1 << (8 * size):
        data = value.to_bytes(size, "little")
    else:
        raise ConfigError(where, value, f"an integer that fits {size} bytes (map {ref.map.name} declares no BTF "
                          "type: an object built with clang -g and __type() in its map definition names fields)")
    if len(data) != size:
        raise ConfigError(where, value, f"a value of {size} bytes (the map's size), not {len(data)}")
    return data
