"""BPF Type Format: the types a compiled BPF object declares, by name (``Btf``).

What ``perfkit.describe`` needs to write a program's configuration by field names: struct members
with their offsets and sizes, the byte order a typedef declares (``__be16``, ``__be32``, ``__be64``:
network order; every other integer the host's), enums, arrays, and the variables of the global
data sections (``.rodata``, ``.data``, ``.bss``) with their offsets. The raw BTF comes from libbpf
(``perfkit.libbpf.BpfObject.btf_raw``: fixed up on open, so sections have their sizes and variables
their offsets), and is decoded by ``bpftool btf dump ... -j``.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

from perfkit.errors import PerfkitError

BPFTOOL = os.environ.get("BPFTOOL", "bpftool")
#: Kinds that only qualify or rename another type.
_ALIASES = ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG", "DECL_TAG")


@dataclass(frozen=True)
class Member:
    """A struct or union member."""

    name: str
    type_id: int
    offset: int
    """[bytes] from the start of the struct."""
    bits: int = 0
    """A bitfield's width [bits]; 0: a whole member."""


@dataclass(frozen=True)
class Variable:
    """A global of a data section."""

    name: str
    type_id: int
    offset: int
    """[bytes] into the section."""
    size: int


class Btf:
    """The types of one BTF blob, by id, with lookups by name."""

    def __init__(self, types: list[dict[str, Any]]):
        self.types = {int(t["id"]): t for t in types}

    @classmethod
    def from_raw(cls, raw: bytes) -> Btf:
        """Decode raw BTF (``bpftool btf dump file F -j``)."""
        with tempfile.NamedTemporaryFile(suffix=".btf") as f:
            f.write(raw)
            f.flush()
            proc = subprocess.run([BPFTOOL, "btf", "dump", "file", f.name, "-j"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PerfkitError(f"{BPFTOOL} btf dump failed: {' '.join(proc.stderr.split())}")
        return cls(json.loads(proc.stdout)["types"])

    @classmethod
    def from_id(cls, btf_id: int) -> Btf:
        """The BTF object with kernel id ``btf_id`` (a loaded program's or map's)."""
        proc = subprocess.run([BPFTOOL, "btf", "dump", "id", str(btf_id), "-j"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PerfkitError(f"{BPFTOOL} btf dump id {btf_id} failed: {' '.join(proc.stderr.split())}")
        return cls(json.loads(proc.stdout)["types"])

    def get(self, type_id: int) -> dict[str, Any]:
        return self.types.get(type_id, {"kind": "VOID", "name": "void"})

    def resolve(self, type_id: int) -> int:
        """The type behind typedefs and qualifiers."""
        while self.get(type_id)["kind"] in _ALIASES:
            type_id = int(self.get(type_id)["type_id"])
        return type_id

    def big_endian(self, type_id: int) -> bool:
        """Whether an integer type is declared in network order (a ``__be*`` typedef on the way)."""
        while self.get(type_id)["kind"] in _ALIASES:
            if str(self.get(type_id).get("name", "")).startswith("__be"):
                return True
            type_id = int(self.get(type_id)["type_id"])
        return False

    def name(self, type_id: int) -> str:
        """The type as C spells it, for messages (``__be32``, ``struct flow_key``, ``__u8[6]``)."""
        t = self.get(type_id)
        kind, name = t["kind"], t.get("name", "(anon)")
        if kind in ("STRUCT", "UNION", "ENUM", "ENUM64"):
            return f"{kind.lower().replace('64', '')} {name}"
        if kind == "ARRAY":
            return f"{self.name(int(t['type_id']))}[{t['nr_elems']}]"
        if kind in ("CONST", "VOLATILE", "RESTRICT", "TYPE_TAG") or name == "(anon)" and "type_id" in t:
            return self.name(int(t["type_id"]))
        return name

    def size(self, type_id: int) -> int:
        t = self.get(self.resolve(type_id))
        if t["kind"] == "ARRAY":
            return int(t["nr_elems"]) * self.size(int(t["type_id"]))
        if t["kind"] == "PTR":
            return 8
        return int(t.get("size", 0))

    def members(self, type_id: int) -> list[Member]:
        """A struct's or union's members (``[]`` for other kinds)."""
        t = self.get(self.resolve(type_id))
        out = []
        for m in t.get("members", []):
            bits = int(m.get("bitfield_size", 0) or 0)
            out.append(Member(m["name"], int(m["type_id"]), int(m["bits_offset"]) // 8, bits))
        return out

    def fields(self, type_id: int) -> list[Member]:
        """``members``, with the members of anonymous structs and unions in their place (C names
        them as the outer struct's: ``rec.packets`` of ``struct { union { __u64 packets; ... }; }``)."""
        out = []
        for m in self.members(type_id):
            if m.name in ("", "(anon)") and self.members(m.type_id):
                out += [Member(f.name, f.type_id, m.offset + f.offset, f.bits) for f in self.fields(m.type_id)]
            else:
                out.append(m)
        return out

    def enum(self, name: str) -> dict[str, int]:
        """Member name -> value of ``enum name``; {} when BTF has no such enum."""
        for t in self.types.values():
            if t["kind"] in ("ENUM", "ENUM64") and t.get("name") == name:
                return {v["name"]: int(v["val"]) for v in t.get("values", [])}
        return {}

    def enum_of(self, type_id: int) -> dict[str, int]:
        """Member name -> value of the enum ``type_id`` is (after typedefs); {} for other types."""
        t = self.get(self.resolve(type_id))
        if t["kind"] not in ("ENUM", "ENUM64"):
            return {}
        return {v["name"]: int(v["val"]) for v in t.get("values", [])}

    def section(self, name: str) -> dict[str, Variable]:
        """The variables of data section ``name`` (``.rodata``), by name; {} when it has none."""
        for t in self.types.values():
            if t["kind"] == "DATASEC" and t.get("name") == name:
                out = {}
                for v in t.get("vars", []):
                    var = self.get(int(v["type_id"]))
                    out[var["name"]] = Variable(var["name"], int(var["type_id"]), int(v["offset"]), int(v["size"]))
                return out
        return {}

    def sections(self) -> list[str]:
        return sorted(t["name"] for t in self.types.values() if t["kind"] == "DATASEC")
