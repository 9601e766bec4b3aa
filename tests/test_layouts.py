"""perfkit/layouts.py must match bpf/include/*_kern_user.h exactly: structs against the BTF of the
compiled objects (what the kernel sees), enums against a C program compiled from the headers."""
from __future__ import annotations

import ctypes
import json
import subprocess

import pytest

from perfkit import layouts
from tests.conftest import BUILD, ROOT


def btf_types(obj: str) -> dict[int, dict]:
    out = subprocess.run(["bpftool", "btf", "dump", "file", str(BUILD / obj), "-j"],
                         check=True, capture_output=True, text=True).stdout
    return {t["id"]: t for t in json.loads(out)["types"]}


def btf_size(types: dict[int, dict], type_id: int) -> int:
    t = types[type_id]
    while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        t = types[t["type_id"]]
    if t["kind"] == "ARRAY":
        return t["nr_elems"] * btf_size(types, t["type_id"])
    return t["size"]


@pytest.mark.parametrize("name", list(layouts.STRUCTS))
def test_struct_matches_btf(name):
    types = btf_types(layouts.BTF_OBJECTS[name])
    matches = [t for t in types.values() if t["kind"] == "STRUCT" and t.get("name") == name]
    assert matches, f"struct {name} not in the BTF of {layouts.BTF_OBJECTS[name]}"
    btf = matches[0]
    cls = layouts.STRUCTS[name]
    assert ctypes.sizeof(cls) == btf["size"], "struct size"
    got = [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]
    want = [(m["name"], m["bits_offset"] // 8, btf_size(types, m["type_id"])) for m in btf["members"]]
    assert got == want


def test_enums_match_the_headers(tmp_path):
    lines = ['#include <stdio.h>', '#include "pgwu_kern_user.h"', "int main(void) {"]
    for cname, py_enum in layouts.ENUMS.items():
        for member in py_enum:
            lines.append(f'printf("{member.name} %d\\n", (int){member.name});')
    lines.append("return 0; }")
    src = tmp_path / "enums.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "enums"
    subprocess.run(["cc", "-I", str(ROOT / "bpf" / "include"), str(src), "-o", str(exe)], check=True)
    printed = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                           check=True).stdout.splitlines())
    want = {m.name: str(int(m)) for e in layouts.ENUMS.values() for m in e}
    assert printed == want


def test_enum_covers_every_enumerator_of_the_header():
    """A new enumerator added to the header but not to Python is caught too."""
    header = (ROOT / "bpf" / "include" / "pgwu_kern_user.h").read_text()
    body = header[header.index("enum pgwu_stat {"):]
    body = body[:body.index("};")]
    names = [ln.strip().split()[0].rstrip(",") for ln in body.splitlines()[1:] if ln.strip().startswith("PGWU_")]
    assert names == [m.name for m in layouts.PgwuStat]
