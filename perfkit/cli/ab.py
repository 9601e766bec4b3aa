"""``perfkit ab --base REV --head REV [CAMPAIGN]``: two revisions built apart, measured interleaved, compared.

Builds both revisions of the repository (``--repo``, default: the current directory) in git
worktrees (their BPF objects, their perfkit), runs the campaign's units on the same testbed in the
order A B, B A, A B ... (``--repeats`` times per side), and compares head with base with the noise
bands of ``perfkit compare``. Writes into ``--out``: ``pr-comment.md`` (verdict, table, what limited
each figure), ``ab-change.png``, ``ab-repeats.png`` and ``summary.json``; the two sides are also
runs of the store (``--root``). Exit status: 0 no regression ("no change beyond the noise", or an
improvement); 1 a figure fell by more than max(--threshold, its noise); 2 bad input; 3 a side failed
to build or run (one line naming the revision); 130 interrupted (the worktrees are removed).

``--dataplane FILE``: the repository is the user's own, and FILE (relative to it) the description
of their dataplane: each side is that revision's description, its object built by its build
command; perfkit is the running one, the same for both sides (the summary's ``perfkit``). Absent, or
one of perfkit's own dataplanes: the revisions are perfkit's, as above. ``--dataplane NAME``, the
registry name of a plugin package whose source is the repository (``perfkit dataplane new NAME
--plugin``): each side is that revision installed with pip into a side environment of its own;
perfkit is again the running one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfkit.cli.options import add_json, emit, integer, number
from perfkit.errors import ConfigError, RegressionFound
from perfkit.perfci.sides import git
from perfkit.perfci.userside import side_kind
from perfkit.store import DEFAULT_ROOT

DEFAULT_CAMPAIGN = "campaigns/perf-ci.yaml"


def repo_root(option: str, path: str) -> Path:
    """The top of the git repository at ``path``; a ``ConfigError`` when it is none."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(option, path, "a directory in a git repository")
    try:
        return Path(git(p, "rev-parse", "--show-toplevel"))
    except Exception:
        raise ConfigError(option, path, "a directory in a git repository") from None


def campaign_file(path: str) -> Path:
    if not Path(path).is_file():
        raise ConfigError("CAMPAIGN", path, f"a campaign file that exists, e.g. {DEFAULT_CAMPAIGN}")
    return Path(path)


def cmd_ab(args: argparse.Namespace) -> int:
    from perfkit.perfci.ab import run_ab  # plots, scipy: only when it runs
    repo = repo_root("--repo", args.repo)
    side_kind(args.dataplane, plugins=True)
    campaign = campaign_file(args.campaign)
    out = Path(args.out) if args.out else Path("reports") / "ab"
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    res = run_ab(repo, args.base, args.head, campaign, repeats=args.repeats, threshold_pct=args.threshold,
                 root=Path(args.root), out=out, dataplane=args.dataplane, say=say)
    emit(res.to_dict(), args.json, lambda d: (f"{d['headline']}\ncomment: {d['files']['comment']}\n"
                                              f"summary: {d['files']['summary']}\nruns: {d['base']['run_id']} (base), "
                                              f"{d['head']['run_id']} (head)"))
    sys.stdout.flush()
    if res.regressed:
        raise RegressionFound(res.headline())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ab", help="build two revisions, measure them interleaved, compare (exit 1 on regression)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_revisions_setting(p)
    p.add_argument("--base", required=True, metavar="REV", help="the revision to compare with (branch, tag, commit)")
    p.add_argument("--head", required=True, metavar="REV", help="the revision under test")
    p.add_argument("--repeats", type=integer(2, 50), default=3,
                   help="runs of every unit per side (default 3; at least 2, for the noise band)")
    p.add_argument("--threshold", type=number(0.0, "a percentage"), default=5.0, metavar="PCT",
                   help="smallest drop that counts as a regression [%%] (default 5; noise can widen it)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the comment, plots and summary go (default reports/ab)")
    add_json(p)
    p.set_defaults(func=cmd_ab)


def add_revisions_setting(p: argparse.ArgumentParser) -> None:
    """CAMPAIGN, --repo and --root: what ``perfkit ab`` and ``perfkit bisect`` measure revisions with."""
    p.add_argument("campaign", nargs="?", default=DEFAULT_CAMPAIGN, metavar="CAMPAIGN",
                   help=f"campaign file (default {DEFAULT_CAMPAIGN})")
    p.add_argument("--repo", default=".", metavar="DIR", help="the git repository (default: the current directory)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    p.add_argument("--dataplane", default=None, metavar="FILE|NAME",
                   help="the user's dataplane: its description file, relative to --repo, or the name of the plugin "
                        "package the repository holds; perfkit stays the running one (default: the revisions are "
                        "perfkit's own)")
