"""``perfkit dataplanes``: the installed dataplanes, where each comes from, and the broken ones.
``perfkit dataplane check NAME|FILE``: the conformance check of one (``perfkit.conformance``)."""
from __future__ import annotations

import argparse
from typing import Any

from perfkit import conformance, dataplanes
from perfkit.cli.options import add_json, emit


def listing() -> list[dict[str, Any]]:
    """One entry per registered dataplane: name, title, origin, and why it is broken (or None)."""
    broken = dataplanes.broken()
    out = []
    for name, origin in dataplanes.origins().items():
        dp = dataplanes.get(name) if name not in broken else None
        out.append({"name": name, "title": dp.title if dp else None, "entry_point": origin.value,
                    "distribution": origin.distribution, "version": origin.version, "file": origin.file,
                    "has_model": dp.has_model if dp else None, "has_bench": dp.has_bench if dp else None,
                    "broken": broken.get(name)})
    return out


def _human(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        source = f"{r['distribution']} {r['version']}" if r["distribution"] else r["entry_point"]
        if r["broken"]:
            lines.append(f"{r['name']:<12} BROKEN: {r['broken']} (from {source})")
            continue
        missing = [what for what, has in (("model", r["has_model"]), ("prog-bench", r["has_bench"])) if not has]
        extra = f"; no {', no '.join(missing)}" if missing else ""
        lines.append(f"{r['name']:<12} {r['title']} (from {source}, {r['file']}{extra})")
    return "\n".join(lines) or "no dataplane installed"


def cmd_dataplanes(args: argparse.Namespace) -> int:
    emit(listing(), args.json, _human)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    result = conformance.check(dataplanes.get(args.dataplane))
    emit(result.to_dict(), args.json, lambda _: "\n".join(c.line() for c in result.checks)
         + f"\n{result.dataplane}: {'conforms' if result.ok else 'does not conform'}")
    return 0 if result.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataplanes", help="list the installed dataplanes, where each comes from, and broken ones",
                       description=__doc__)
    add_json(p)
    p.set_defaults(func=cmd_dataplanes)
    d = sub.add_parser("dataplane", help="work on one dataplane (check: the conformance check)")
    dsub = d.add_subparsers(dest="dataplane_command", required=True, metavar="COMMAND")
    c = dsub.add_parser("check", help="check a dataplane against the interface: load, run, counters, layouts, model",
                        description=conformance.__doc__.splitlines()[0])
    c.add_argument("dataplane", metavar="NAME|FILE", help="an installed dataplane's name, or a description file")
    add_json(c)
    c.set_defaults(func=cmd_check)
