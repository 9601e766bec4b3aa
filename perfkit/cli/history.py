"""``perfkit history [CAMPAIGN] [--metric GOAL]``: a campaign's figures by commit, in commit order.

Gathers the complete runs of the campaign (by its name; ``ab`` and ``bisect`` runs included) from the
store by the git commit each recorded, orders the commits as the repository (``--repo``) does, and
draws each figure along them with its noise band, a figure limited by the generator or the testbed
as a lower bound (an upward triangle). Writes ``history.png``, ``history.json`` and the page
``history.html`` into ``--out``, and prints each figure's steps (a change from one commit to the
next beyond both commits' noise and --threshold). Exit status: 0; 2 bad input or no run.

Runs of a user's dataplane (``ab``/``bisect`` ``--dataplane FILE``, or ``perfkit run`` of a campaign
whose dataplane is a description file in a git repository) are gathered by that dataplane's commit:
give their repository as ``--repo`` for its commit order.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from perfkit.campaign.schema import load_campaign
from perfkit.cli.ab import DEFAULT_CAMPAIGN, repo_root
from perfkit.cli.options import add_json, emit, number
from perfkit.store import DEFAULT_ROOT


def _human(d: dict) -> str:
    lines = [f"campaign {d['campaign']}: {len(d['commits'])} commit(s)"]
    for p in d["points"]:
        change = f" {p['change_pct']:+.1f} %" if p["change_pct"] is not None else ""
        mark = "  <- step" if p["step"] else ""
        low = " (lower bound)" if p["at_least"] else ""
        lines.append(f"  {p['figure']}  {p['commit_label']}  {p['value_mpps']:.4g} Mpps ±{p['noise_pct']:.1f} %"
                     f"{low} ({p['runs']} run(s)){change}{mark}  {p['subject']}")
    lines.append(f"page: {d['files']['page']}")
    return "\n".join(lines)


def cmd_history(args: argparse.Namespace) -> int:
    from perfkit.perfci.history import gather, write_history  # plots, scipy: only when it runs
    name = load_campaign(args.campaign).name if Path(args.campaign).is_file() else args.campaign
    repo = repo_root("--repo", args.repo)
    hist = gather(Path(args.root), name, repo, args.metric, args.threshold)
    files = write_history(hist, Path(args.out) if args.out else Path("reports") / "history" / name)
    emit({**hist.to_dict(), "files": files}, args.json, _human)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="a campaign's figures by commit: plot, page, steps", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("campaign", nargs="?", default=DEFAULT_CAMPAIGN, metavar="CAMPAIGN",
                   help=f"campaign file or name (default {DEFAULT_CAMPAIGN})")
    p.add_argument("--metric", default=None, metavar="GOAL", help="only this figure: max, ndr, pdr ... (default all)")
    p.add_argument("--threshold", type=number(0.0, "a percentage"), default=5.0, metavar="PCT",
                   help="smallest change from one commit to the next that is a step [%%] (default 5; noise can widen it)")
    p.add_argument("--repo", default=".", metavar="DIR", help="the git repository giving the commit order: perfkit's, or the user dataplane's (default .)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the plot and page go (default reports/history/NAME)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    add_json(p)
    p.set_defaults(func=cmd_history)
