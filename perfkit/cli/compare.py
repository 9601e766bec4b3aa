"""``perfkit compare RUN_ID --baseline RUN_ID``: per-scenario change vs a baseline run, for CI.

Prints a table (or ``--markdown`` for a pull-request comment, or ``--json``). Exit status: 0 no
regression; 1 at least one figure fell by more than max(--threshold, its noise); 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys

from perfkit.analysis import load_run
from perfkit.cli.options import check_run, number
from perfkit.compare import compare_runs
from perfkit.errors import RegressionFound
from perfkit.store import DEFAULT_ROOT


def cmd_compare(args: argparse.Namespace) -> int:
    check_run("--run", args.run, args.root)
    check_run("--baseline", args.baseline, args.root)
    cmp = compare_runs(load_run(args.run, args.root), load_run(args.baseline, args.root), args.threshold)
    if args.json:
        json.dump(cmp.to_dict(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    elif args.markdown:
        sys.stdout.write(cmp.to_markdown())
    else:
        print(cmp.to_text())
    sys.stdout.flush()
    if not cmp.regressions.empty:
        worst = cmp.regressions.sort_values("change_pct").iloc[0]
        raise RegressionFound(f"{len(cmp.regressions)} figure(s) regressed beyond max(threshold {args.threshold:g} %, "
                              f"noise); worst: {worst['scenario_key']} {worst['metric']} {worst['change_pct']:+.1f} %")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare a run with a baseline run (exit 1 on regression)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run (as `perfkit run` printed it)")
    p.add_argument("--baseline", required=True, metavar="RUN_ID")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print machine-readable JSON")
    fmt.add_argument("--markdown", action="store_true", help="print markdown for a pull-request comment")
    p.add_argument("--threshold", type=number(0.0, "a percentage"), default=5.0, metavar="PCT",
                   help="smallest drop that counts as a regression [%%] (default 5; noise can widen it)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    p.set_defaults(func=cmd_compare)
