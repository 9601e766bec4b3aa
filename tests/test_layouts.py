"""The Python mirrors (perfkit/layouts.py and each dataplane's layouts.py) must match
bpf/include/*_kern_user.h exactly: structs against the BTF of the compiled objects (what the kernel
sees) and, like enums and mirrored constants (``DEFINES``), against a C program compiled from the
headers (which also covers structs only used through pointers, absent from BTF)."""
from __future__ import annotations

import ctypes
import importlib
import json
import pkgutil
import re
import subprocess
from types import SimpleNamespace

import pytest

import perfkit.dataplanes
from perfkit import layouts as generic
from tests.conftest import BUILD, ROOT


def _mirrors() -> SimpleNamespace:
    """Every mirror module merged: the generic one and ``perfkit/dataplanes/*/layouts.py``."""
    mods = [generic] + [importlib.import_module(f"perfkit.dataplanes.{m.name}.layouts")
                        for m in pkgutil.iter_modules(perfkit.dataplanes.__path__)
                        if m.ispkg and (ROOT / "perfkit" / "dataplanes" / m.name / "layouts.py").exists()]
    return SimpleNamespace(STRUCTS={k: v for m in mods for k, v in m.STRUCTS.items()},
                           ENUMS={k: v for m in mods for k, v in m.ENUMS.items()},
                           HEADERS=tuple(h for m in mods for h in m.HEADERS),
                           DEFINES={k: v for m in mods for k, v in getattr(m, "DEFINES", {}).items()},
                           DEFINE_HEADERS=tuple(h for m in mods for h in getattr(m, "DEFINE_HEADERS", ())))


layouts = _mirrors()


def _btf_structs() -> dict[str, tuple[dict, dict[int, dict]]]:
    """struct name -> (its BTF entry, all types of that object), over every built object."""
    found = {}
    for obj in sorted(BUILD.glob("*.o")):
        out = subprocess.run(["bpftool", "btf", "dump", "file", str(obj), "-j"], check=True,
                             capture_output=True, text=True).stdout
        types = {t["id"]: t for t in json.loads(out)["types"]}
        for t in types.values():
            if t["kind"] == "STRUCT" and t.get("name") in layouts.STRUCTS:
                found.setdefault(t["name"], (t, types))
    return found


BTF = _btf_structs()


def btf_size(types: dict[int, dict], type_id: int) -> int:
    t = types[type_id]
    while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        t = types[t["type_id"]]
    if t["kind"] == "ARRAY":
        return t["nr_elems"] * btf_size(types, t["type_id"])
    return t["size"]


def fields_of(cls) -> list[tuple[str, int, int]]:
    return [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]


def test_the_maps_value_types_are_in_btf():
    for name in ("pgwu_config", "pgwu_ul_session", "pgwu_dl_session", "gen_config", "gen_state",
                 "sink_stream", "sink_totals", "steer_config", "bench_config"):
        assert name in BTF


@pytest.mark.parametrize("name", sorted(BTF))
def test_struct_matches_btf(name):
    btf, types = BTF[name]
    cls = layouts.STRUCTS[name]
    assert ctypes.sizeof(cls) == btf["size"], "struct size"
    want = [(m["name"], m["bits_offset"] // 8, btf_size(types, m["type_id"])) for m in btf["members"]]
    assert fields_of(cls) == want


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, str]:
    """Compile a C program printing sizeof/offsetof of every mirrored field and every enumerator."""
    lines = ["#include <stdio.h>", "#include <stddef.h>"] + [f'#include "{h}"' for h in
                                                             dict.fromkeys(layouts.HEADERS + layouts.DEFINE_HEADERS)]
    lines.append("int main(void) {")
    for name, cls in layouts.STRUCTS.items():
        lines.append(f'printf("{name} %zu\\n", sizeof(struct {name}));')
        for field, *_ in cls._fields_:
            lines.append(f'printf("{name}.{field} %zu %zu\\n", offsetof(struct {name}, {field}), '
                         f'sizeof(((struct {name} *)0)->{field}));')
    for e in layouts.ENUMS.values():
        for m in e:
            lines.append(f'printf("{m.name} %d\\n", (int){m.name});')
    for name in layouts.DEFINES:
        lines.append(f'printf("{name} %lld\\n", (long long)({name}));')
    lines.append("return 0; }")
    tmp = tmp_path_factory.mktemp("layouts")
    (tmp / "probe.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-I", str(ROOT / "bpf" / "include"), str(tmp / "probe.c"), "-o", str(tmp / "probe")],
                   check=True)
    out = subprocess.run([str(tmp / "probe")], capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


@pytest.mark.parametrize("name", list(layouts.STRUCTS))
def test_struct_matches_the_compiled_header(compiled, name):
    cls = layouts.STRUCTS[name]
    assert int(compiled[name]) == ctypes.sizeof(cls)
    got = {f: f"{off} {size}" for f, off, size in fields_of(cls)}
    assert got == {f: compiled[f"{name}.{f}"] for f in got}


def test_enums_match_the_headers(compiled):
    for e in layouts.ENUMS.values():
        for m in e:
            assert compiled[m.name] == str(int(m))


def test_mirrored_constants_match_the_headers(compiled):
    assert layouts.DEFINES, "the mirrors declare constants"
    assert {k: int(compiled[k]) for k in layouts.DEFINES} == layouts.DEFINES


@pytest.mark.parametrize("cname", list(layouts.ENUMS))
def test_enum_covers_every_enumerator_of_the_header(cname):
    """A new enumerator added to the header but not to Python is caught too."""
    header = "".join((ROOT / "bpf" / "include" / h).read_text() for h in layouts.HEADERS)
    body = header[header.index(f"enum {cname} {{"):]
    body = body[:body.index("};")]
    names = [ln.strip().split()[0].rstrip(",") for ln in body.splitlines()[1:]
             if ln.strip() and not ln.strip().startswith("/")]
    assert names == [m.name for m in layouts.ENUMS[cname]]


def test_every_struct_of_the_headers_is_mirrored():
    text = "".join((ROOT / "bpf" / "include" / h).read_text() for h in layouts.HEADERS)
    declared = set(re.findall(r"^struct (\w+) \{", text, re.M))
    assert declared == set(layouts.STRUCTS)
