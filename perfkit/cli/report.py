"""``perfkit report RUN_ID``: execute the notebooks on a stored run and write reports/<run_id>/*.html.

No traffic is sent: the notebooks read the run store (batch regeneration). Exit status: 0 every page
rendered; 2 a notebook failed (its page shows the traceback) or bad input.
"""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, add_reports_dir, check_run, emit
from perfkit.errors import PerfkitError
from perfkit.report import build_report, check_pages
from perfkit.store import DEFAULT_ROOT


def _human(d: dict) -> str:
    lines = [f"report of run {d['run_id']}" + (f" (baseline {d['baseline_run_id']})" if d["baseline_run_id"] else "")]
    for p in d["pages"]:
        lines.append(f"  {p['file']:<22} {'ok' if p['ok'] else 'FAILED: ' + str(p['error'])} ({p['seconds']:.0f} s)")
    if "check_problems" in d:
        lines.append("checked in headless Chromium: " + ("no NaN in a table, every figure with title, unit and legend"
                                                          if not d["check_problems"] else
                                                          f"{len(d['check_problems'])} problem(s)"))
        lines += [f"  {p}" for p in d["check_problems"]]
    lines.append(f"open {d['index']}")
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> int:
    check_run("--run", args.run, args.root)
    if args.baseline not in (None, "auto"):
        check_run("--baseline", args.baseline, args.root)
    rep = build_report(args.run, baseline_run_id=args.baseline, data_root=args.root, reports_root=args.reports,
                       show_code=args.show_code, progress=not args.no_progress)
    out = rep.to_dict()
    if args.check:
        out["check_problems"] = check_pages(rep.dir)
    emit(out, args.json, _human)
    if not rep.ok:
        failed = ", ".join(p.name for p in rep.pages if not p.ok)
        raise PerfkitError(f"notebook(s) failed: {failed}; see their pages in {rep.dir}")
    if out.get("check_problems"):
        raise PerfkitError(f"{len(out['check_problems'])} problem(s) in the pages as Chromium renders them; "
                           f"first: {out['check_problems'][0]}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the HTML report of a run (papermill + nbconvert, no traffic)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run (as `perfkit run` printed it)")
    p.add_argument("--baseline", default=None, metavar="RUN_ID",
                   help="run to compare with, or 'auto' (the last complete run of the same campaign)")
    p.add_argument("--show-code", action="store_true", help="keep the notebooks' code in the HTML")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    add_reports_dir(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--check", action="store_true",
                   help="check the pages in headless Chromium: no NaN in a table, no index column, no table wider "
                        "than the page, every figure with a title, "
                        "an axis unit and a legend (exit 2 otherwise)")
    add_json(p)
    p.set_defaults(func=cmd_report)
