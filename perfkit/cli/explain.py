"""``perfkit explain``: where the nanoseconds per packet go between two sets of trials.

Two scenarios of a run (``--run R --a KEY --b KEY``), two values of a knob in a run (``--run R
--knob NAME [--a VALUE --b VALUE]``), or a run against a baseline run (``--run R --baseline R2
[--a KEY]``). Prints the gap in ns per packet with its uncertainty, the functions that carry it and
the part left unexplained, and writes a differential flame graph of ns per packet
(docs/explain.md).
"""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, check_run, emit, integer
from perfkit.explain import TOP
from perfkit.store import DEFAULT_ROOT


def cmd_explain(args: argparse.Namespace) -> int:
    from perfkit.explain.command import choose_pairs, default_flamegraph_dir, explain_pairs   # pandas, scipy

    check_run("--run", args.run, args.root)
    if args.baseline is not None:
        check_run("--baseline", args.baseline, args.root)
    pairs = choose_pairs(args.run, args.root, args.a, args.b, args.knob, args.baseline)
    where = None if args.no_flamegraph else (args.flamegraph or default_flamegraph_dir(args.run, args.root))
    done = explain_pairs(pairs, where, args.top)
    emit({"explanations": [x.to_dict() for x in done]}, args.json, lambda _: "\n\n".join(x.text() for x in done))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="where the ns per packet go between two scenarios, knob values or runs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run (as `perfkit run` printed it)")
    p.add_argument("--a", default=None, metavar="KEY", help="the first side: a scenario key, or a value of --knob")
    p.add_argument("--b", default=None, metavar="KEY", help="the second side, explained against --a")
    p.add_argument("--knob", default=None, metavar="NAME", help="compare two values of this knob (the rest the same)")
    p.add_argument("--baseline", default=None, metavar="RUN_ID", help="compare the run with this run, per scenario")
    p.add_argument("--top", type=integer(1, 50), default=TOP, metavar="N",
                   help=f"functions to name at most (default {TOP})")
    p.add_argument("--flamegraph", default=None, metavar="DIR",
                   help="where the differential flame graphs go (default: the run's explain/ directory)")
    p.add_argument("--no-flamegraph", action="store_true", help="draw no flame graph")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    add_json(p)
    p.set_defaults(func=cmd_explain)
