"""``perfkit bisect --good REV --bad REV [CAMPAIGN] --metric M --threshold PCT``: find the commit that made
a figure slower.

Drives ``git bisect run`` in a worktree of its own (the checkout is never touched). At each step it
builds the revision and measures it against the good one, interleaved, round after round, until the
95 % confidence interval of the change clears -PCT one way or the other: below, the revision is bad;
above, good. A revision that does not build, or that stays undecided after --max-rounds rounds, is
skipped (git's exit 125). ``--metric``: ``max`` (the max-rate figure) or a search goal (``ndr``,
``pdr`` ...). Prints the first bad commit, its measured change and every step's figures. Exit
status: 0 the first bad commit was found; 2 bad input, or git bisect could not name one commit
(skips left several); 130 interrupted (worktrees removed, the bisection reset).

``--dataplane FILE``: bisect the user's own repository (``--repo``), FILE its description (relative
to it): every step builds that revision's description and object, and the running perfkit measures
both sides, as in ``perfkit ab --dataplane``.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from perfkit.cli.ab import add_revisions_setting, campaign_file, repo_root
from perfkit.cli.options import add_json, emit, integer, number
from perfkit.errors import ConfigError, PerfkitError
from perfkit.perfci.userside import side_kind


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f} %"


def _human(d: dict) -> str:
    lines = []
    for i, s in enumerate(d["steps"], 1):
        ci = f", CI [{s['ci_pct'][0]:+.1f}, {s['ci_pct'][1]:+.1f}] %" if s.get("ci_pct") else ""
        lines.append(f"step {i}: {s['commit'][:10]} {s['verdict']}: change {_pct(s['change_pct'])}{ci} ({s['why']})")
        lines += [f"  round {r['round']}: good {r['good_mpps']:.4g} Mpps, revision {r['rev_mpps']:.4g} Mpps"
                  for r in s["rounds"]]
    if d["first_bad"]:
        lines.append(f"first bad commit: {d['first_bad']} {d['subject']} (measured change vs good: "
                     f"{_pct(d['change_pct'])}; {d['measured_steps']} measured step(s))")
    return "\n".join(lines)


def cmd_bisect(args: argparse.Namespace) -> int:
    from perfkit.perfci.bisect import run_bisect  # plots, scipy: only when it runs
    repo = repo_root("--repo", args.repo)
    side_kind(args.dataplane)
    campaign = campaign_file(args.campaign)
    if args.min_rounds > args.max_rounds:
        raise ConfigError("--min-rounds", args.min_rounds, f"at most --max-rounds ({args.max_rounds})")
    res = run_bisect(repo, args.good, args.bad, campaign, metric=args.metric, threshold_pct=args.threshold,
                     min_rounds=args.min_rounds, max_rounds=args.max_rounds, root=Path(args.root),
                     dataplane=args.dataplane, say=lambda m: print(m, file=sys.stderr, flush=True))
    emit(res.to_dict(), args.json, _human)
    sys.stdout.flush()
    if res.first_bad is None:
        raise PerfkitError(f"no single first bad commit: skipped steps leave {len(res.candidates)} candidates: "
                           + ", ".join(c[:10] for c in res.candidates))
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    """One step, run by ``git bisect run``: its exit code is git's answer; an error aborts the bisection."""
    from perfkit.perfci.bisect import ABORT, step  # plots, scipy: only when it runs
    try:
        return step(Path(args.state), lambda m: print(m, file=sys.stderr, flush=True))
    except PerfkitError as err:
        print(f"perfkit bisect: error: {' '.join(str(err).split())}", file=sys.stderr)
        return ABORT
    except Exception as err:  # noqa: BLE001 - a bug must stop the bisection, not mark a commit bad
        print(f"perfkit bisect: internal error: {type(err).__name__}: {' '.join(str(err).split())}", file=sys.stderr)
        return ABORT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bisect", help="find the commit that made a figure slower (git bisect run, measured steps)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_revisions_setting(p)
    p.add_argument("--good", required=True, metavar="REV", help="a revision without the regression")
    p.add_argument("--bad", required=True, metavar="REV", help="a later revision with it")
    p.add_argument("--metric", default="max", metavar="GOAL",
                   help="the figure: max (max-rate received rate) or a search goal (ndr, pdr ...); default max")
    p.add_argument("--threshold", type=number(0.0, "a percentage"), default=10.0, metavar="PCT",
                   help="a revision slower than the good one by more than this is bad [%%] (default 10)")
    p.add_argument("--min-rounds", type=integer(2, 100), default=3,
                   help="rounds (good + revision, interleaved) before a step may decide (default 3)")
    p.add_argument("--max-rounds", type=integer(2, 100), default=8,
                   help="rounds after which an undecided step is skipped (default 8)")
    add_json(p)
    p.set_defaults(func=cmd_bisect)
    s = sub.add_parser("bisect-step", description="one step of perfkit bisect, run by git bisect run (internal)")
    s.add_argument("--state", required=True, help="the bisection's state file")
    s.set_defaults(func=cmd_step)
